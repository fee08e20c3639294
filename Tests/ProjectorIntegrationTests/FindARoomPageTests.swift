import AMQPClient
import AvailabilityProjector
import BookingContracts
import BrokerObjects
import Foundation
import ServiceLifecycle
import Testing
import TestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The page's "Find a room" in Chromium, driven over the DevTools protocol
/// (Tests/Tools/page_driver.py): search, see the suggestions, book the
/// first as `PAGE_USER`, see its bar turn booked, book it again and read
/// the conflict in words; the booking endpoint's quota answer over plain
/// HTTP; and a projector without `PAGE_USER` that does not book.
@Suite("Find a room on the page")
struct FindARoomPageTests {
    static func post(_ url: String, _ body: String, contentType: String = "application/json",
                     headers: [String: String] = [:]) async throws -> (Int, String) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = "POST"
        request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = Data(body.utf8)
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    @Test func searchSuggestBookAndSeeTheBarChange() async throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let chromium else {
            Issue.record("Debian's chromium is not installed: run scripts/install-deps.sh")
            return
        }
        let h = try await ProjectorHarness.start(startProjector: false)
        #expect(try await h.send(.registerRoom, RegisterRoom(name: "Kiosk", capacity: 2, maxActiveBookings: 1)).isOK)
        let date = localDate(daysFromNow: 4)
        let d = ContractFormat.calendarDate(date)!
        let now = Date(timeIntervalSince1970: TimeInterval(CivilDays.days(year: d.year, month: d.month, day: d.day) * 86_400 - 12 * 3600))

        // The page books as a user of its own: ordinary rights, no admin.
        let pageURL = try TestBroker.addUser(uniqueName("page"), to: h.url)
        let pageConnection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: pageURL, connectionName: "page"), logger: testLogger("page"))
        let logger = testLogger("find-page")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("find-page")).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: h.url, connectionName: "find-page"), logger: logger)
        let port = try freeTCPPort()
        let app = try await ProjectorApp.build(connection: connection, dataDirectory: directory, httpPort: port, logger: logger,
                                               now: { now }, queues: try ProjectorQueues(instance: "page"),
                                               pageConnection: pageConnection)
        let (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
        let base = "http://127.0.0.1:\(port)"
        try await withTimeout(60, "projector ready") {
            while (try? await httpGet(base + "/readyz"))?.status != 200 { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(try await httpGet(base + "/api/page").body == #"{"booking":true}"#)

        let script = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("find") + ".js")
        defer { try? FileManager.default.removeItem(at: script) }
        try Self.scenario(date: date).write(to: script, atomically: true, encoding: .utf8)
        let artifacts = ProjectorHarness.repositoryRoot.appendingPathComponent("test-artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let shot = artifacts.appendingPathComponent("projector-find-a-room.png").path
        try? FileManager.default.removeItem(atPath: shot)
        let driver = ProjectorHarness.repositoryRoot.appendingPathComponent("Tests/Tools/page_driver.py").path
        let run = try await RebuildAndPageTests.run("/usr/bin/env", ["python3", driver, chromium, base + "/?date=\(date)", script.path, shot],
                                                    timeout: 120)
        #expect(run.status == 0, "page driver: \(run.err.suffix(3000))")
        struct Outcome: Decodable {
            var items: [String]
            var before: [String]
            var booked: [String: String]
            var after: [String]
            var again: [String: String]
            var week: [String]
            var weekFirst: [String]
            var stored: [String: String]
        }
        let outcome = try JSONDecoder().decode(Outcome.self, from: Data(run.out.utf8))
        // Six people and a beamer from 07:00: Berlin (8) first; München (16) at the same hour next.
        #expect(outcome.items.prefix(3) == ["Berlin \(date) 07:00 08:00", "München \(date) 07:00 08:00", "Berlin \(date) 08:00 09:00"],
                "\(outcome.items)")
        #expect(outcome.before == ["07:00 19:00 free"])
        #expect(outcome.booked["ok"] == "true" && outcome.booked["text"] == "Booked: Berlin, \(date) 07:00–08:00.", "\(outcome.booked)")
        #expect(outcome.after == ["07:00 08:00 booked", "08:00 19:00 free"])
        #expect(outcome.again["code"] == "2000" && outcome.again["text"]?.hasPrefix("Taken:") == true, "\(outcome.again)")
        #expect(outcome.week == (0..<7).map { LocalClock.adding(days: $0, to: date)! }, "\(outcome.week)")
        #expect(outcome.weekFirst == ["07:00 08:00 booked", "08:00 19:00 free"])
        #expect(outcome.stored == ["local": "null", "session": "ada@example.com"],
                "contact details kept for the tab, not for the next person at a shared screen: \(outcome.stored)")
        let pngBytes = (try? Data(contentsOf: URL(fileURLWithPath: shot)))?.count ?? 0
        #expect(pngBytes > 5_000, "screenshot missing or empty")

        // The booking is the page user's: one requester, whom the quota binds.
        let stored = try await h.send(.createBooking, CreateBooking(
            room: "Kiosk", date: .calendarDate(date), start: "15:00", end: "16:00", title: "Not the page's",
            attendees: [AttendeeInput(name: "Bo", email: "bo@example.com", phone: "0170 1234567")]))
        #expect(stored.isOK, "another requester's booking does not count against the page")
        func book(_ start: String, _ end: String) async throws -> PageBookingAnswer {
            let (status, body) = try await Self.post(base + "/api/book", """
                {"room":"Kiosk","date":"\(date)","start":"\(start)","end":"\(end)","title":"Desk","name":"Ada Lovelace",
                 "email":"ada@example.com","phone":"0170 1234567"}
                """)
            #expect(status == 200, "\(body)")
            return try ContractJSON.decode(PageBookingAnswer.self, from: Data(body.utf8))
        }
        #expect(try await book("09:00", "10:00").ok)
        let second = try await book("11:00", "12:00")
        #expect(!second.ok && second.code == 1113 && second.message.hasPrefix("Quota used:"), "\(second)")
        // Not JSON: refused before anything is sent.
        let form = try await Self.post(base + "/api/book", "room=Kiosk", contentType: "application/x-www-form-urlencoded")
        #expect(form.0 == 415)
        // A script of another site whose name was re-pointed at this
        // machine (DNS rebinding) names its own host; one of another
        // origin sends it: both refused before anything is sent.
        let request = """
            {"room":"Kiosk","date":"\(date)","start":"13:00","end":"14:00","title":"Desk","name":"Mallory",
             "email":"mallory@example.com","phone":"0170 1234567"}
            """
        let rebound = try await Self.post(base + "/api/book", request, headers: ["Host": "evil.example:\(port)"])
        #expect(rebound.0 == 403 && rebound.1.contains("not served as 'evil.example'"), "\(rebound)")
        let foreign = try await Self.post(base + "/api/book", request, headers: ["Origin": "http://evil.example:\(port)"])
        #expect(foreign.0 == 403 && foreign.1.contains("origin"), "\(foreign)")
        let own = try await Self.post(base + "/api/book", request, headers: ["Origin": "http://127.0.0.1:\(port)"])
        #expect(own.0 == 200, "the page's own origin books (here: refused by the quota) \(own)")

        await group.triggerGracefulShutdown()
        _ = await running.result
        await h.stop()
    }

    @Test func withoutPageUserThePageDoesNotBook() async throws {
        let h = try await ProjectorHarness.start()
        #expect(try await httpGet(h.base + "/api/page").body == #"{"booking":false}"#)
        let (status, _) = try await Self.post(h.base + "/api/book", #"{"room":"Berlin"}"#)
        #expect(status == 404)
        // The week view answers without booking: seven days of one room.
        let week = try await httpGet(h.base + "/api/week?room=Berlin&date=\(localDate(daysFromNow: 1))")
        #expect(week.status == 200)
        #expect(try ContractJSON.decode(DayView.self, from: Data(week.body.utf8)).rooms.count == 7)
        await h.stop()
    }

    /// The user's steps, in the page, with their waits; returns what the test checks.
    static func scenario(date: String) -> String {
        #"""
        (async () => {
          const sleep = ms => new Promise(r => setTimeout(r, ms));
          const until = async (what, f, ms = 20000) => {
            const t = Date.now();
            for (;;) { const v = f(); if (v) return v; if (Date.now() - t > ms) throw new Error("timed out waiting for " + what); await sleep(50); }
          };
          const $ = id => document.getElementById(id);
          const bar = room => [...document.querySelectorAll('.seg[data-room="' + room + '"]')].map(s => s.dataset.from + " " + s.dataset.to + " " + s.dataset.state);
          await until("the bars", () => document.querySelector("#rooms[data-loaded]"));
          await until("booking enabled", () => $("who").className === "on");
          $("find-details").open = true;
          $("find-from").value = "\#(date)"; $("find-days").value = "1"; $("find-duration").value = "60";
          $("find-people").value = "6"; $("find-equipment").value = "beamer"; $("find-step").value = "60";
          $("who-title").value = "Planning"; $("who-name").value = "Ada Lovelace";
          $("who-email").value = "ada@example.com"; $("who-phone").value = "0170 1234567";
          $("who-email").dispatchEvent(new Event("change"));
          const stored = { local: String(localStorage.getItem("who-email")), session: String(sessionStorage.getItem("who-email")) };
          $("find-go").click();
          await until("suggestions", () => $("suggestions").getAttribute("data-loaded"));
          const items = [...document.querySelectorAll("#suggestions li")].map(li => [li.dataset.room, li.dataset.date, li.dataset.start, li.dataset.end].join(" "));
          const first = document.querySelector("#suggestions li");
          const room = first.dataset.room;
          const before = bar(room);
          first.querySelector("button.book").click();
          await until("the answer", () => $("book-result").getAttribute("data-ok"));
          const booked = { ok: $("book-result").dataset.ok, text: $("book-result").textContent };
          await until("the bar to show the booking", () => document.querySelector('.seg[data-room="' + room + '"][data-from="' + first.dataset.start + '"][data-state="booked"]'), 30000);
          const after = bar(room);
          first.querySelector("button.book").click();
          await until("the second answer", () => $("book-result").getAttribute("data-ok") === "false");
          const again = { code: $("book-result").dataset.code || "", text: $("book-result").textContent };
          // The room's week: its name opens seven rows, one per day.
          document.querySelector('[data-week="' + room + '"]').click();
          await until("the week", () => document.querySelectorAll("#rooms .row[data-date]").length === 7);
          const week = [...document.querySelectorAll("#rooms .row[data-date]")].map(r => r.dataset.date);
          const weekFirst = [...document.querySelectorAll('.seg[data-room="' + room + '"][data-date="' + week[0] + '"]')]
            .map(s => s.dataset.from + " " + s.dataset.to + " " + s.dataset.state);
          $("all-rooms").click();
          await until("all rooms again", () => document.querySelectorAll("#rooms .row").length > 1
                                                && !document.querySelector("#rooms .row[data-date]"));
          return JSON.stringify({ items, before, booked, after, again, week, weekFirst, stored });
        })()
        """#
    }
}
