import APNs
import Foundation
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests.BroadcastJobs {
    /// Waits until every job has an outcome, counting broadcasts the emulator accepted (which
    /// its device counters leave out) beside device pushes, dead letters and feedback entries.
    static func waitUntilSettled(_ bed: WorkerBed, enqueued: Int) async throws -> (QueueLedger, MockAPNsStatistics) {
        var ledger = QueueLedger()
        var statistics = try await bed.emulator.statistics()
        let settled = try await waitFor("every job has an outcome", timeout: .seconds(60), interval: .milliseconds(100), failOnTimeout: false) {
            ledger = try await bed.ledger(enqueued: enqueued)
            statistics = try await bed.emulator.statistics()
            let outcomes = ledger.outcomes + statistics.broadcastsAccepted
            return outcomes >= enqueued && ledger.jobsLength == 0 && ledger.pending == 0 && ledger.retry == 0
        }
        if !settled {
            let diagnostics = await bed.diagnostics()
            Issue.record("not settled: \(ledger); broadcasts accepted \(statistics.broadcastsAccepted)\n\(diagnostics)")
        }
        return (ledger, statistics)
    }

    /// A mixed queue: device pushes, broadcasts to a stored and a no-storage channel, a
    /// no-storage broadcast with an expiration, and broadcasts to a deleted and a never-created
    /// channel. Each broadcast is accepted exactly once on its channel, the expiration is a dead
    /// letter, the unknown channels are feedback entries with `channel_id`, every job counted.
    @Test
    func mixedQueueOfDevicePushesAndBroadcastsCountsEveryJob() async throws {
        try await withWorkerBed { bed in
            let bundle = WorkerHarness.bundleID
            let stored = try await bed.emulator.onServer { try $0.createChannel(bundleID: bundle, storagePolicy: .mostRecent).id }
            let noStorage = try await bed.emulator.onServer { try $0.createChannel(bundleID: bundle, storagePolicy: .noStorage).id }
            let deleted = try await bed.emulator.onServer { server in
                let id = try server.createChannel(bundleID: bundle, storagePolicy: .noStorage).id
                server.deleteChannel(bundleID: bundle, id: id)
                return id
            }
            let neverCreated = "bmV2ZXItY3JlYXRlZA=="
            let later = String(Int64(Date().timeIntervalSince1970) + 3_600)
            enum Kind: Equatable { case device, stored, noStorage, noStorageExpiring, deleted, neverCreated }
            // 300 device pushes, 40 + 30 broadcasts delivered, 10 dead letters, 10 feedback entries, interleaved.
            let plan: [Kind] = (0..<400).map { index in
                switch index % 40 {
                case 0..<30: .device
                case 30..<34: .stored
                case 34, 35, 36: .noStorage
                case 37: .noStorageExpiring
                case 38: index % 80 == 38 ? .deleted : .neverCreated
                default: .device
                }
            }
            let update = Self.update
            let ids = try await bed.enqueue(plan.count) { index -> [(String, String)] in
                switch plan[index] {
                case .device: [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                case .stored: [("channel_id", stored), ("payload", update), ("priority", "5")]
                case .noStorage: [("channel_id", noStorage), ("payload", update), ("expiration", "0")]
                case .noStorageExpiring: [("channel_id", noStorage), ("payload", update), ("expiration", later)]
                case .deleted: [("channel_id", deleted), ("payload", update), ("expiration", "0")]
                case .neverCreated: [("channel_id", neverCreated), ("payload", update), ("push_type", "liveactivity")]
                }
            }
            func count(_ kinds: Kind...) -> Int { plan.filter { kinds.contains($0) }.count }
            let worker = try await bed.startWorker()
            let (ledger, statistics) = try await Self.waitUntilSettled(bed, enqueued: plan.count)

            #expect(ledger.acceptedUnique == count(.device) && ledger.duplicates == 0, "\(ledger)")
            #expect(statistics.broadcastsAccepted == count(.stored, .noStorage) && statistics.broadcastDuplicates == 0, "\(statistics)")
            let perChannel = try await bed.emulator.onServer { server in
                (server.broadcastCount(bundleID: bundle, channelID: stored), server.broadcastCount(bundleID: bundle, channelID: noStorage))
            }
            #expect(perChannel.0 == count(.stored) && perChannel.1 == count(.noStorage), "exactly once per channel: \(perChannel)")
            #expect(ledger.deadLettered == count(.noStorageExpiring) && ledger.deadByReason == ["BadExpirationDate": count(.noStorageExpiring)], "\(ledger)")
            #expect(ledger.feedback == count(.deleted, .neverCreated), "\(ledger)")
            #expect(ledger.outcomes + statistics.broadcastsAccepted == plan.count, "every job counted once: \(ledger)")

            for entry in try await bed.client.entries(bed.keys.dead) {
                #expect(entry["channel_id"] == noStorage && entry["status"] == "400" && entry["attempts"] == "1", "\(entry)")
            }
            let feedback = try await bed.client.entries(bed.keys.feedback)
            let expected = Dictionary(uniqueKeysWithValues: plan.indices.filter { plan[$0] == .deleted || plan[$0] == .neverCreated }.map {
                (ids[$0], plan[$0] == .deleted ? deleted : neverCreated)
            })
            #expect(feedback.count == expected.count)
            for entry in feedback {
                let ok = entry["token"] == nil && entry["job"].flatMap { expected[$0] } == entry["channel_id"]
                    && entry["reason"] == "ChannelNotRegistered" && entry["topic"] == bundle
                #expect(ok, "a feedback entry names the channel (not a token), its job and ChannelNotRegistered: \(entry)")
                if !ok { break }
            }
            let counters = try await worker.counters()
            #expect(counters.accepted == count(.device, .stored, .noStorage) && counters.deadTokens == count(.deleted, .neverCreated)
                && counters.retried == 0, "\(counters)")
        }
    }

    /// An app without the Broadcast capability: its broadcasts are dead-lettered
    /// FeatureNotEnabled and its device pushes keep flowing (the app is not halted).
    @Test
    func featureNotEnabledDeadLettersBroadcastsAndKeepsTheAppSending() async throws {
        try await withWorkerBed(emulator: { $0.broadcastDisabled = true }) { bed in
            let broadcasts = 20
            let devices = 200
            let total = devices + broadcasts
            let update = Self.update
            try await bed.enqueue(total) { index in
                index % 11 == 5 && index / 11 < broadcasts
                    ? [("channel_id", "dHN0LXNyY2gtY2hubA=="), ("payload", update)]
                    : [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
            }
            let worker = try await bed.startWorker()
            let ledger = try await bed.waitUntilSettled(enqueued: total)
            #expect(ledger.settled && ledger.acceptedUnique == devices && ledger.duplicates == 0, "\(ledger)")
            #expect(ledger.deadByReason == ["FeatureNotEnabled": broadcasts] && ledger.feedback == 0, "\(ledger)")
            #expect(try await worker.counters().accepted == devices)
            #expect(try await bed.client.entries(bed.keys.dead).allSatisfy { $0["status"] == "400" && $0["attempts"] == "1" })
        }
    }

    /// Connections dropped under broadcasts in flight: each is resent (at once, then from the
    /// retry set) with the same apns-id until accepted, and the channel counts every broadcast
    /// exactly once.
    @Test
    func failedBroadcastsAreRetriedAndDeliveredExactlyOnce() async throws {
        try await withWorkerBed(emulator: { $0.disconnectAfterStreams = 40 }) { bed in
            let bundle = WorkerHarness.bundleID
            let channel = try await bed.emulator.onServer { try $0.createChannel(bundleID: bundle, storagePolicy: .mostRecent).id }
            let count = 200
            let update = Self.update
            try await bed.enqueue(count) { _ in [("channel_id", channel), ("payload", update)] }
            let worker = try await bed.startWorker()
            let (ledger, statistics) = try await Self.waitUntilSettled(bed, enqueued: count)
            let delivered = try await bed.emulator.onServer { $0.broadcastCount(bundleID: bundle, channelID: channel) }
            #expect(delivered == count && statistics.broadcastDuplicates == 0, "\(statistics)")
            #expect(ledger.deadLettered == 0 && ledger.feedback == 0 && statistics.disconnects > 0, "\(ledger) \(statistics)")
            let counters = try await worker.counters()
            #expect(counters.accepted == count && counters.notificationsSent > count, "resent after the drops: \(counters)")
        }
    }
}
