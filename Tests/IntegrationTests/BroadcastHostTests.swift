import Foundation
import MockAPNs
import Queue
import Testing
import Transport

extension IntegrationTests.BroadcastJobs {
    /// A second emulator that plays the broadcast host: it verifies the same provider key as the
    /// bed's (the push host), and one CA file makes the worker trust both.
    static func broadcastHost(for bed: WorkerBed) async throws -> (host: EmulatorHost, caFile: String) {
        let pem = try String(contentsOfFile: bed.emulator.keyPath, encoding: .utf8)
        // Its certificate comes from a private CA: two self-signed certificates for the same
        // name in one CA file would have OpenSSL check the second against the first.
        let directory = bed.emulator.directory.path("broadcast-ca")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificates = try TestCertificates(directory: directory)
        let host = try await EmulatorHost {
            $0.jwtKeyPEM = pem
            $0.certificateFile = certificates.serverCertificate
            $0.keyFile = certificates.serverKey
        }
        let caFile = bed.emulator.directory.path("both-emulators.pem")
        let both = try String(contentsOfFile: bed.emulator.certificatePath, encoding: .utf8)
            + (try String(contentsOfFile: certificates.caFile, encoding: .utf8))
        try both.write(toFile: caFile, atomically: true, encoding: .utf8)
        return (host, caFile)
    }

    /// `herald worker` for the bed's queue, its push host the bed's emulator, trusting `caFile`.
    static func workerArguments(_ bed: WorkerBed, caFile: String) -> [String] {
        bed.redis.cliArguments + [
            "--apns-host", "127.0.0.1", "--apns-port", String(bed.emulator.port), "--ca-file", caFile,
            "--team-id", WorkerHarness.teamID, "--key-id", WorkerHarness.keyID, "--key-file", bed.emulator.keyPath,
            "--bundle-id", WorkerHarness.bundleID, "--metrics-port", "0", "--connections", "2",
        ]
    }

    /// With a broadcast host (by flags, and by the config file's `broadcast_host`), device pushes
    /// go to the push host and broadcasts to the broadcast host only: each emulator sees only its
    /// kind. Broadcasts to a channel the broadcast host never created are feedback entries with
    /// `channel_id`. Every job is counted.
    @Test(arguments: [false, true])
    func broadcastsGoToTheBroadcastHostAndDevicePushesToThePushHost(byFile: Bool) async throws {
        try await withWorkerBed { bed in
            let (broadcastHost, caFile) = try await Self.broadcastHost(for: bed)
            defer { broadcastHost.shutdown() }
            let bundle = WorkerHarness.bundleID
            let channel = try await broadcastHost.onServer { try $0.createChannel(bundleID: bundle, storagePolicy: .noStorage).id }
            // A channel the push host knows and the broadcast host does not: sent to the push host,
            // it would be accepted there; sent where it must go, it is ChannelNotRegistered.
            let pushHostOnly = try await bed.emulator.onServer { try $0.createChannel(bundleID: bundle, storagePolicy: .noStorage).id }
            let update = Self.update
            enum Kind { case device, broadcast, unknownChannel }
            let plan: [Kind] = (0..<240).map { $0 % 8 == 3 ? .broadcast : $0 % 24 == 7 ? .unknownChannel : .device }
            let ids = try await bed.enqueue(plan.count) { index -> [(String, String)] in
                switch plan[index] {
                case .device: [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                case .broadcast: [("channel_id", channel), ("payload", update), ("expiration", "0")]
                case .unknownChannel: [("channel_id", pushHostOnly), ("payload", update), ("expiration", "0")]
                }
            }
            let devices = plan.filter { $0 == .device }.count
            let broadcasts = plan.filter { $0 == .broadcast }.count
            let unknown = plan.filter { $0 == .unknownChannel }.count

            var arguments = Self.workerArguments(bed, caFile: caFile)
            if byFile {
                let yaml = """
                    apps:
                      default:
                        broadcast_host: 127.0.0.1
                        broadcast_port: \(broadcastHost.port)
                    """
                let path = bed.emulator.directory.path("broadcast-host.yaml")
                try yaml.write(toFile: path, atomically: true, encoding: .utf8)
                arguments += ["--config", path]
            } else {
                arguments += ["--apns-broadcast-host", "127.0.0.1", "--apns-broadcast-port", String(broadcastHost.port)]
            }
            let worker = try WorkerProcess(arguments: arguments, logPath: bed.emulator.directory.path("worker-broadcast-host.log"))
            defer { worker.signal(SIGKILL) }

            var ledger = QueueLedger()
            var pushStatistics = try await bed.emulator.statistics()
            var broadcastStatistics = try await broadcastHost.statistics()
            let settled = try await waitFor("every job has an outcome", timeout: .seconds(60), interval: .milliseconds(100), failOnTimeout: false) {
                guard worker.isRunning else { return true }
                ledger = try await bed.ledger(enqueued: plan.count)
                pushStatistics = try await bed.emulator.statistics()
                broadcastStatistics = try await broadcastHost.statistics()
                return ledger.outcomes + broadcastStatistics.broadcastsAccepted >= plan.count && ledger.jobsLength == 0 && ledger.pending == 0
                    && ledger.retry == 0
            }
            #expect(settled && worker.isRunning, "\(ledger); broadcast host \(broadcastStatistics)\n\(worker.logTail())")

            // Each host saw only its kind, each notification once.
            #expect(ledger.acceptedUnique == devices && ledger.duplicates == 0, "device pushes on the push host: \(ledger)")
            #expect(pushStatistics.broadcastsAccepted == 0 && pushStatistics.rejected.isEmpty,
                    "no broadcast reached the push host: \(pushStatistics)")
            #expect(broadcastStatistics.acceptedUnique == 0, "no device push reached the broadcast host: \(broadcastStatistics)")
            #expect(broadcastStatistics.broadcastsAccepted == broadcasts && broadcastStatistics.broadcastDuplicates == 0, "\(broadcastStatistics)")
            let onChannel = try await broadcastHost.onServer { $0.broadcastCount(bundleID: bundle, channelID: channel) }
            #expect(onChannel == broadcasts)

            // The channel the broadcast host does not know: feedback entries naming it.
            #expect(ledger.feedback == unknown && ledger.deadLettered == 0, "\(ledger)")
            let feedback = try await bed.client.entries(bed.keys.feedback)
            let unknownIDs = Set(plan.indices.filter { plan[$0] == .unknownChannel }.map { ids[$0] })
            #expect(feedback.allSatisfy { $0["channel_id"] == pushHostOnly && $0["reason"] == "ChannelNotRegistered"
                && $0["job"].map(unknownIDs.contains) == true }, "\(feedback)")
            #expect(ledger.outcomes + broadcastStatistics.broadcastsAccepted == plan.count, "every job counted once: \(ledger)")
        }
    }

    /// A broadcast host that refuses every connection holds up only the broadcasts: the device
    /// pushes are all delivered meanwhile, and the waiting broadcasts are not lost: a worker that
    /// stops hands them back to the retry set.
    @Test
    func aBroadcastHostThatIsDownDoesNotHoldUpDevicePushes() async throws {
        try await withWorkerBed { bed in
            let closedPort = try RedisServer.freePort()
            let update = Self.update
            let plan = (0..<330).map { $0 % 11 == 4 }  // 30 broadcasts among 300 device pushes
            try await bed.enqueue(plan.count) { index -> [(String, String)] in
                plan[index]
                    ? [("channel_id", "dHN0LWRvd24taG9zdA=="), ("payload", update), ("expiration", "0")]
                    : [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
            }
            let broadcasts = plan.filter { $0 }.count
            let devices = plan.count - broadcasts
            let worker = try WorkerProcess(
                arguments: Self.workerArguments(bed, caFile: bed.emulator.certificatePath)
                    + ["--apns-broadcast-host", "127.0.0.1", "--apns-broadcast-port", String(closedPort), "--drain-timeout", "5"],
                logPath: bed.emulator.directory.path("worker-broadcast-down.log"))
            defer { worker.signal(SIGKILL) }

            try await waitFor("the device pushes are delivered", timeout: .seconds(60), interval: .milliseconds(100)) {
                try await bed.ledger(enqueued: plan.count).acceptedUnique >= devices
            }
            #expect(worker.isRunning, "\(worker.logTail())")
            let during = try await bed.ledger(enqueued: plan.count)
            #expect(during.acceptedUnique == devices && during.deadLettered == 0 && during.feedback == 0, "\(during)")

            // Stopping: the broadcasts still waiting for their host go back to the retry set.
            worker.signal(SIGTERM)
            let exit = try await worker.waitForExit(timeout: .seconds(30))
            #expect(exit?.status == 0, "\(String(describing: exit))\n\(worker.logTail())")
            let after = try await bed.ledger(enqueued: plan.count)
            let retried = try await bed.client.integer("ZCARD", bed.keys.retry)
            #expect(after.acceptedUnique == devices && after.pending == 0, "\(after)")
            #expect(retried == broadcasts, "every waiting broadcast is in the retry set: \(retried) of \(broadcasts); \(after)")
            #expect(after.acceptedUnique + retried == plan.count, "every job counted: \(after)")
        }
    }
}
