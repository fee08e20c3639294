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

    /// Holds the store's writer until the returned function is called.
    func holdWriter(_ store: ProjectorStore) async -> @Sendable () -> Void {
        let release = DispatchSemaphore(value: 0)
        await withCheckedContinuation { (started: CheckedContinuation<Void, Never>) in
            store.pool.asyncWriteWithoutTransaction { _ in
                started.resume()
                release.wait()
            }
        }
        return { release.signal() }
    }

    /// Waits until `count` changes are queued behind the held writer.
    func waitUntilQueued(_ store: ProjectorStore, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while store.queued.withLock({ $0.items.count }) < count {
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

    @Test func queuedChangesShareTransactionsAndTheIndexMatchesTheFile() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(.room(Room(name: "Paris", capacity: 4), occurredAt: "2026-11-01T10:00:00Z"))
        let before = store.applyTransactions.load(ordering: .relaxed)
        let release = await holdWriter(store)
        let count = 300
        let announced = Box<[RoomDay: [String]]>([:])
        try await withThrowingTaskGroup(of: ApplyOutcome.self) { group in
            for i in 0..<count {
                group.addTask {
                    try await store.apply(Self.booking(i)) { changes in
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
        let release = await holdWriter(store)
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
}
