import AvailabilityProjector
import BookingContracts
import Foundation
import TestSupport
import Testing

/// Contract v1.2 holds on the time-bar page, in headless Chromium
/// (Tests/Tools/page_driver.py): a hold made through the real handler is
/// drawn in its own style (blue stripes, its legend entry "held — awaiting
/// confirmation"), apart from a pending booking, in the day and the week
/// view; once its requester confirms it, the same slot is drawn booked.
@Suite("Held slots on the page", .serialized)
struct HeldPageTests {
    struct Seen: Decodable {
        var state: String
        var className: String
        var background: String
        var title: String
    }
    struct Outcome: Decodable {
        var held: Seen
        var pending: Seen
        var legend: String
        var legendBackground: String
        var week: Seen
        var berlin: [String]
    }
    struct After: Decodable {
        var berlin: [String]
        var heldSegments: Int
        var week: [String]
    }

    /// The scenario before the confirmation: the held and the pending
    /// segment with their computed backgrounds, the legend entry, then the
    /// room's week (its name opens it) and the held day's segment there.
    static func before(date: String) -> String {
        #"""
        (async () => {
          const sleep = ms => new Promise(r => setTimeout(r, ms));
          const until = async (what, f, ms = 20000) => {
            const t = Date.now();
            for (;;) { const v = f(); if (v) return v; if (Date.now() - t > ms) throw new Error("timed out waiting for " + what); await sleep(50); }
          };
          const seen = s => ({ state: s.dataset.state, className: s.className, background: getComputedStyle(s).backgroundImage, title: s.title });
          const bar = sel => [...document.querySelectorAll(sel)].map(s => s.dataset.from + " " + s.dataset.to + " " + s.dataset.state);
          await until("the bars", () => document.querySelector("#rooms[data-loaded]"));
          const held = await until("the held segment", () => document.querySelector('.seg[data-room="Berlin"][data-from="09:00"]'));
          const pending = await until("the pending segment", () => document.querySelector('.seg[data-room="Boardroom"][data-from="11:00"]'));
          const legend = document.querySelector('[data-legend="held"]');
          const out = { held: seen(held), pending: seen(pending), legend: legend ? legend.textContent : "",
                        legendBackground: legend ? getComputedStyle(legend.querySelector("i")).backgroundImage : "",
                        berlin: bar('#rooms .seg[data-room="Berlin"]') };
          document.querySelector('[data-week="Berlin"]').click();
          await until("the week", () => document.querySelectorAll("#rooms .row[data-date]").length === 7);
          out.week = seen(await until("the held day in the week",
            () => document.querySelector('.seg[data-room="Berlin"][data-date="\#(date)"][data-from="09:00"]')));
          return JSON.stringify(out);
        })()
        """#
    }

    /// The scenario after the confirmation: the day's and the week's bar.
    static func after(date: String) -> String {
        #"""
        (async () => {
          const sleep = ms => new Promise(r => setTimeout(r, ms));
          const until = async (what, f, ms = 20000) => {
            const t = Date.now();
            for (;;) { const v = f(); if (v) return v; if (Date.now() - t > ms) throw new Error("timed out waiting for " + what); await sleep(50); }
          };
          const bar = sel => [...document.querySelectorAll(sel)].map(s => s.dataset.from + " " + s.dataset.to + " " + s.dataset.state);
          await until("the bars", () => document.querySelector("#rooms[data-loaded]"));
          const out = { berlin: bar('#rooms .seg[data-room="Berlin"]'), heldSegments: document.querySelectorAll("#rooms .seg.held").length };
          document.querySelector('[data-week="Berlin"]').click();
          await until("the week", () => document.querySelectorAll("#rooms .row[data-date]").length === 7);
          out.week = bar('.seg[data-room="Berlin"][data-date="\#(date)"]');
          return JSON.stringify(out);
        })()
        """#
    }

    static func drive(_ chromium: String, _ url: String, _ scenario: String) async throws -> String {
        let script = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("held") + ".js")
        defer { try? FileManager.default.removeItem(at: script) }
        try scenario.write(to: script, atomically: true, encoding: .utf8)
        let driver = ProjectorHarness.repositoryRoot.appendingPathComponent("Tests/Tools/page_driver.py").path
        let run = try await RebuildAndPageTests.run("/usr/bin/env", ["python3", driver, chromium, url, script.path], timeout: 120)
        #expect(run.status == 0, "page driver: \(run.err.suffix(3000))")
        return run.out
    }

    @Test func aHoldIsDrawnHeldAndBookedOnceConfirmed() async throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let chromium else {
            Issue.record("Debian's chromium is not installed: run scripts/install-deps.sh")
            return
        }
        let h = try await ProjectorHarness.start()
        let date = localDate(daysFromNow: 3)
        try await h.waitForRooms("date=\(date)", "rooms") { $0.count == 6 }
        let ada = [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")]
        let user = h.client.user
        let hold = try await h.send(.createBooking, CreateBooking(room: "Berlin", date: .calendarDate(date), start: "09:00",
                                                                  end: "10:00", title: "Held", attendees: ada,
                                                                  hold: HoldRequest(minutes: 30)), userID: user)
        let held = try #require(hold.bookingValue, "\(hold)")
        #expect(held.status == .held)
        let pending = try await h.send(.createBooking, CreateBooking(room: "Boardroom", date: .calendarDate(date), start: "11:00",
                                                                     end: "12:00", title: "Asked", attendees: ada), userID: user)
        #expect(pending.bookingValue?.status == .pending, "\(pending)")
        // Held is taken, as before: the contract's answer leaves it out.
        try await h.waitForRooms("date=\(date)", "both projected") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "10:00 - 19:00"] && room($0, "Boardroom")?.avail == ["08:00 - 11:00", "12:00 - 18:00"]
        }
        let (_, dayBody) = try await httpGet(h.base + "/api/day?date=\(date)&name=Berlin")
        let dayView = try ContractJSON.decode(DayView.self, from: Data(dayBody.utf8))
        #expect(dayView.rooms.first { $0.name == "Berlin" }?.segments.map { "\($0.from) \($0.to) \($0.state)" }
                    == ["07:00 09:00 free", "09:00 10:00 held", "10:00 19:00 free"], "\(dayBody)")

        let url = h.base + "/?date=\(date)"
        let first = try JSONDecoder().decode(Outcome.self, from: Data(try await Self.drive(chromium, url, Self.before(date: date)).utf8))
        #expect(first.berlin == ["07:00 09:00 free", "09:00 10:00 held", "10:00 19:00 free"], "\(first.berlin)")
        #expect(first.held.state == "held" && first.held.className == "seg held", "\(first.held)")
        // The held style: stripes of --held (#2f6fb0) — not pending's orange.
        #expect(first.held.background.contains("rgb(47, 111, 176)"), "\(first.held.background)")
        #expect(first.pending.state == "pending" && first.pending.className == "seg pending", "\(first.pending)")
        #expect(!first.pending.background.contains("rgb(47, 111, 176)") && first.pending.background != first.held.background,
                "\(first.pending.background)")
        #expect(first.held.title == "09:00–10:00 held — awaiting confirmation", "\(first.held.title)")
        #expect(first.legend == "held — awaiting confirmation" && first.legendBackground == first.held.background,
                "\(first.legend) \(first.legendBackground)")
        #expect(first.week.state == "held" && first.week.className == "seg held", "week view: \(first.week)")

        // Its requester confirms it: the same slot, now booked.
        let confirmed = try await h.send(.confirmBooking, ConfirmBooking(bookingId: held.id), userID: user)
        #expect(confirmed.bookingValue?.status == .confirmed, "\(confirmed)")
        try await withTimeout(60, "the page's data shows it booked") {
            while try await !httpGet(h.base + "/api/day?date=\(date)&name=Berlin").1.contains(#""state":"booked""#) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let second = try JSONDecoder().decode(After.self, from: Data(try await Self.drive(chromium, url, Self.after(date: date)).utf8))
        #expect(second.berlin == ["07:00 09:00 free", "09:00 10:00 booked", "10:00 19:00 free"], "\(second.berlin)")
        #expect(second.heldSegments == 0)
        #expect(second.week == ["07:00 09:00 free", "09:00 10:00 booked", "10:00 19:00 free"], "\(second.week)")
        await h.stop()
    }
}
