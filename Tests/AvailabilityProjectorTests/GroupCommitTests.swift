import BookingContracts
import Foundation
import GRDB
import Synchronization
import Testing
@testable import AvailabilityProjector

/// Booking events waiting for the projector's writer commit together
/// (ProjectorGroupCommit.swift). The writer is held by a test write while
/// the changes queue, so how they batch does not depend on timing.
@Suite("Projector group commit")
struct GroupCommitTests {
    struct Injected: Error {}

    /// Shared between the test's tasks.
    final class Box<Value: Sendable>: Sendable {
        let value: Mutex<Value>
        init(_ value: Value) { self.value = Mutex(value) }
    }

    /// Waits until `count` changes are queued behind the held writer.
    func waitUntilQueued(_ store: ProjectorStore, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while store.queuedChanges < count {
            try #require(ContinuousClock.now < deadline, "changes did not queue")
            await Task.yield()
        }
    }

    static func booking(_ i: Int) -> ModelChange {
        let room = ["Berlin", "Paris"][i % 2]
        let day = String(format: "2026-11-%02d", 2 + (i / 2) % 20)
        let startMinute = 8 * 60 + (i / 40) * 15
        return .booking(BookingState(id: "b\(i)", room: room, date: day, startMinute: startMinute, endMinute: startMinute + 15,
                                     status: .confirmed, version: 1))
    }

    /// Booking `b<i>` of a replay, in Berlin.
    static func replayed(_ i: Int) -> ModelChange {
        let startMinute = 7 * 60 + (i / 28 % 48) * 15
        return .booking(BookingState(id: "b\(i)", room: "Berlin", date: String(format: "2026-11-%02d", 1 + i % 28),
                                     startMinute: startMinute, endMinute: startMinute + 15, status: .confirmed, version: 1))
    }

    @Test func queuedChangesShareTransactionsAndTheIndexMatchesTheFile() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(.room(Room(name: "Paris", capacity: 4), occurredAt: "2026-11-01T10:00:00Z"))
        let before = store.applyTransactions.load(ordering: .relaxed)
        let release = await store.holdWriter()
        let count = 300
        let announced = Box<[RoomDay: [String]]>([:])
        try await withThrowingTaskGroup(of: ApplyOutcome.self) { group in
            for i in 0..<count {
                group.addTask {
                    try await store.apply(Self.booking(i)) { changes, _ in
                        announced.value.withLock { for c in changes { $0[c.day] = c.avail } }
                    }
                }
            }
            try await waitUntilQueued(store, count)
            release()
            for try await outcome in group { #expect(outcome.applied) }
        }
        // 300 changes, at most 128 a transaction: three transactions, not 300.
        #expect(store.applyTransactions.load(ordering: .relaxed) - before == 3)
        for i in 0..<count { #expect(try await store.booking(id: "b\(i)") != nil, "b\(i)") }
        // Changes of one room-day in one transaction are announced once,
        // by the first of them, with the day as the transaction left it:
        // the last announcement of every day is its state now.
        let state = store.index.snapshot
        let last = announced.value.withLock { $0 }
        #expect(last.count == 40)
        for (day, avail) in last { #expect(store.index.free(day, in: state)?.availStrings == avail, "\(day)") }
        // The index, updated change by change after each commit, is what
        // the file holds.
        let reopened = try ProjectorStore(path: dir.appendingPathComponent("model.sqlite").path)
        #expect(reopened.index.snapshot.days == store.index.snapshot.days)
        #expect(store.index.snapshot.days.values.reduce(0) { $0 + $1.count } == 40)
    }

    @Test func aFailingChangeFailsAloneAndTheOthersCommit() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(.room(Room(name: "Paris", capacity: 4), occurredAt: "2026-11-01T10:00:00Z"))
        store.applyFault.withLock { fault in
            fault = { change in
                if case .booking(let state) = change, state.id == "b5" { return Injected() }
                return nil
            }
        }
        let release = await store.holdWriter()
        let results = Box<[Int: Bool]>([:])
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<10 {
                group.addTask {
                    let ok = (try? await store.apply(Self.booking(i)))?.applied ?? false
                    results.value.withLock { $0[i] = ok }
                }
            }
            try? await waitUntilQueued(store, 10)
            release()
        }
        #expect(results.value.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<10).map { ($0, $0 != 5) }))
        for i in 0..<10 { #expect((try await store.booking(id: "b\(i)") != nil) == (i != 5), "b\(i)") }
    }

    /// A change that commits but whose index update fails (a failed read
    /// of the committed occupancy) is requeued; its redelivery is a no-op
    /// by version, so the index would miss the day until a restart. The
    /// next writer job reads the day again; the republish of the
    /// redelivered event (a writer job too) fails while it cannot.
    @Test func aCommittedChangeTheIndexMissedIsReadAgainByTheNextJob() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let day = RoomDay(room: "Berlin", date: "2026-11-23")
        @Sendable func free() -> [String]? { store.index.free(day, in: store.index.snapshot)?.availStrings }
        store.indexFault.withLock { $0 = Injected() }
        await #expect(throws: Injected.self) { try await store.apply(state("b1", "09:00", "10:00")) }
        #expect(try await store.booking(id: "b1") != nil, "committed")
        #expect(free() == ["07:00 - 19:00"], "the index missed it")
        // While the day cannot be read, a writer job that would announce from the index fails.
        await #expect(throws: Injected.self) { try await store.onWriter { free() } }
        store.indexFault.withLock { $0 = nil }

        // The event again (redelivered): a no-op by version, and the day is
        // read again and announced with it.
        let again = try await store.apply(state("b1", "09:00", "10:00"))
        #expect(!again.applied)
        #expect(again.touched == [day], "what the consumer republishes")
        #expect(again.changes == [DayChange(day: day, timeZone: "Europe/Berlin", avail: ["07:00 - 09:00", "10:00 - 19:00"])])
        #expect(free() == ["07:00 - 09:00", "10:00 - 19:00"])
        #expect(store.staleDays.withLock { $0.isEmpty })
        #expect(try await store.onWriter { free() } == ["07:00 - 09:00", "10:00 - 19:00"])

        // Repaired by another event's batch (the one that missed it moved
        // on): the repair is announced with that event's changes.
        store.indexFault.withLock { $0 = Injected() }
        await #expect(throws: Injected.self) { try await store.apply(state("b2", date: "2026-11-24", "09:00", "10:00")) }
        store.indexFault.withLock { $0 = nil }
        let other = try await store.apply(state("b3", date: "2026-11-25", "09:00", "10:00"))
        #expect(other.changes.map(\.day.date) == ["2026-11-24", "2026-11-25"])
    }

    /// A failing change in a rebuild's batch is found by halving: only it
    /// is missing, in about 2 log₂ n transactions, not one per change.
    @Test func aFailingReplayedChangeIsIsolatedByHalving() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try await store.beginRebuild(replayId: "r1"))
        let count = 4_096
        store.applyFault.withLock { fault in
            fault = { change in
                if case .booking(let state) = change, state.id == "b1234" { return Injected() }
                return nil
            }
        }
        let before = store.replayTransactions.load(ordering: .relaxed)
        await #expect(throws: Injected.self) {
            try await store.applyReplayed([.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z")]
                                          + (0..<count).map(Self.replayed), replayId: "r1")
        }
        let transactions = store.replayTransactions.load(ordering: .relaxed) - before
        #expect(transactions <= 2 * 13 + 1, "\(transactions) transactions for one bad change in \(count + 1)")
        store.applyFault.withLock { $0 = nil }
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.progress.rooms == 1)
        #expect(result.progress.bookings == count - 1, "every booking but the failing one")
        #expect(try await store.booking(id: "b1234") == nil)
        #expect(try await store.booking(id: "b1233") != nil)
        #expect(try await store.booking(id: "b1235") != nil)
    }

    /// A failure every change meets (disk full, the task cancelled) is not
    /// halved: one transaction, not about two per change.
    @Test(arguments: [DatabaseError(resultCode: .SQLITE_FULL) as any Error, CancellationError() as any Error])
    func aFailureOfEveryChangeIsNotHalved(_ failure: any Error) async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try await store.beginRebuild(replayId: "r1"))
        store.applyFault.withLock { fault in fault = { _ in failure } }
        let before = store.replayTransactions.load(ordering: .relaxed)
        await #expect(throws: (any Error).self) {
            try await store.applyReplayed((0..<1_024).map(Self.replayed), replayId: "r1")
        }
        #expect(store.replayTransactions.load(ordering: .relaxed) - before == 1)
    }
}
