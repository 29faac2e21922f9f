import APNs
import Foundation
import Glibc
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Workers that die, are told to stop, or lose Redis mid-run: every job still ends with an
    /// outcome, and the only duplicates are notifications in flight at the moment of a crash.
    /// The crash and SIGTERM tests run the real `herald worker` binary.
    @Suite
    struct WorkerRecovery {
        @Test
        func killedWorkerIsTakenOverBySecondWorker() async throws {
            // 200 ms answers keep notifications in flight, so the kill lands mid-run.
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 200 }) { bed in
                let count = 3_000
                let connections = 2
                let maxStreams = 50
                try await bed.enqueue(count)
                let first = try bed.startProcess([
                    "--connections", String(connections), "--max-streams", String(maxStreams), "--claim-idle", "2",
                ])
                try await waitFor("herald worker \(first.pid) has delivered some jobs", timeout: .seconds(30)) {
                    guard first.isRunning else {
                        throw WaitTimeout(description: "herald worker exited early: \(first.logTail())")
                    }
                    return try await bed.emulator.statistics().acceptedUnique >= 300
                }
                first.signal(SIGKILL)
                let ended = try await first.waitForExit(timeout: .seconds(10))
                #expect(ended?.signalled == true, "killed by SIGKILL: \(String(describing: ended))")
                let atKill = try await bed.emulator.statistics()
                let pendingAtKill = try await bed.client.pendingCount(bed.keys.jobs, group: bed.keys.group)
                try #require(atKill.acceptedUnique < count, "the kill came too late to test anything: \(atKill.json())")
                #expect(pendingAtKill > 0, "the killed worker left entries pending")

                let second = try await bed.startWorker(connections: connections, maxStreams: maxStreams) {
                    $0.claimIdleMilliseconds = 2_000
                }
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(90))
                let counters = try await second.counters()
                let bound = connections * maxStreams
                print("killedWorkerIsTakenOverBySecondWorker: accepted \(atKill.acceptedUnique) before the kill, \(pendingAtKill) pending; "
                    + "the second worker reclaimed \(counters.jobsReclaimed); duplicates \(ledger.duplicates) (bound \(bound)); \(ledger)")

                #expect(ledger.settled && ledger.acceptedUnique == count, "every job accepted at least once: \(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0, "\(ledger)")
                #expect(ledger.duplicates <= bound, "duplicates only from notifications in flight at the kill: \(ledger)")
                #expect(counters.jobsReclaimed > 0, "the second worker took over the dead one's pending entries: \(counters)")
            }
        }

        @Test
        func sigtermDrains() async throws {
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 200 }) { bed in
                let count = 2_000
                let drainTimeout = 10
                try await bed.enqueue(count)
                let first = try bed.startProcess([
                    "--connections", "2", "--max-streams", "50", "--drain-timeout", String(drainTimeout), "--claim-idle", "2",
                ])
                try await waitFor("herald worker \(first.pid) has delivered some jobs", timeout: .seconds(30)) {
                    guard first.isRunning else {
                        throw WaitTimeout(description: "herald worker exited early: \(first.logTail())")
                    }
                    return try await bed.emulator.statistics().acceptedUnique >= 200
                }
                let signalled = ContinuousClock.now
                first.signal(SIGTERM)
                let ended = try await first.waitForExit(timeout: .seconds(drainTimeout + 5))
                let drainTime = ContinuousClock.now - signalled
                try #require(ended != nil, "herald worker did not exit within the drain timeout: \(first.logTail())")
                #expect(ended?.status == 0 && ended?.signalled == false, "exit status \(String(describing: ended)): \(first.logTail())")
                #expect(drainTime < .seconds(drainTimeout), "drained in \(drainTime)")
                let afterExit = try await bed.ledger(enqueued: count)
                try #require(afterExit.acceptedUnique < count, "SIGTERM came too late to test anything: \(afterExit)")
                // A clean drain acknowledged what finished and handed back what it never sent.
                #expect(afterExit.pending == 0, "nothing left pending after a clean drain: \(afterExit)\n\(first.logTail())")

                try await bed.startWorker(connections: 2, maxStreams: 50) { $0.claimIdleMilliseconds = 2_000 }
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(60))
                print("sigtermDrains: drained in \(drainTime); after exit \(afterExit); finally \(ledger)")

                #expect(ledger.settled && ledger.acceptedUnique == count, "none lost: \(ledger)")
                #expect(ledger.duplicates == 0, "a drain finishes or hands back, it never sends twice: \(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0, "\(ledger)")
            }
        }

        @Test
        func redisRestartedMidRun() async throws {
            try await withWorkerBed(appendOnly: true, emulator: { $0.latencyMilliseconds = 100 }) { bed in
                let count = 5_000
                let connections = 2
                let maxStreams = 100
                try await bed.enqueue(count)
                let worker = try await bed.startWorker(connections: connections, maxStreams: maxStreams)
                try await waitFor("the worker has delivered some jobs", timeout: .seconds(30)) {
                    try await bed.emulator.statistics().acceptedUnique >= 1_000
                }
                let inFlight = try await worker.inFlight()
                try bed.redis.restart()
                let atRestart = try await bed.emulator.statistics()
                try #require(atRestart.acceptedUnique < count, "the restart came too late to test anything: \(atRestart.json())")

                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(60))
                let counters = try await worker.counters()
                let bound = connections * maxStreams
                print("redisRestartedMidRun: \(inFlight) in flight, \(atRestart.acceptedUnique) accepted at the restart; "
                    + "duplicates \(ledger.duplicates) (bound \(bound)); redis errors \(counters.redisErrors); \(ledger)")

                #expect(ledger.settled && ledger.acceptedUnique == count, "nothing lost: \(ledger)")
                #expect(ledger.duplicates <= bound, "\(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0, "\(ledger)")
                #expect(counters.redisErrors >= 1, "the worker saw Redis go away: \(counters)")
                // Outcomes written while Redis was away were replayed and confirmed: nothing is left
                // unconfirmed, so a drain ends at once instead of waiting out its timeout (5 s here).
                let drainStart = ContinuousClock.now
                try await worker.drain(timeout: .seconds(4))
                #expect(ContinuousClock.now - drainStart < .seconds(2), "drain after the restart took \(ContinuousClock.now - drainStart)")
            }
        }
    }
}
