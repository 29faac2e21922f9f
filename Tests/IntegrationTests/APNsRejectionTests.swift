import Foundation
import APNs
import MockAPNs
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Notifications that pass Herald's own checks but APNs refuses: each comes back with APNs'
    /// status and reason, mapped to what the sender must do, and none is lost or sent twice.
    @Suite
    struct APNsRejections {
        @Test
        func badRequestsGetAPNsReasons() async throws {
            let bed = try await TestBed {
                $0.unregisteredPrefix = "dead"
                $0.throttlePrefix = "ca11"
                $0.throttleCount = 1
            }
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 50)
                bed.enqueue(100)
                bed.enqueue(20, tokenPrefix: "dead")
                bed.enqueue(20, tokenPrefix: "ca11")
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "\(state)")

            #expect(state.finals == 140 && state.extraOutcomes == 0, "\(state)")
            #expect(state.tally == [
                "accepted": 100, "deadToken(410 Unregistered)": 20, "retryTokenLater(TooManyRequests)": 20,
            ], "\(state)")
            for index in 0..<100 { #expect(state.finalOutcomes[index] == .accepted) }
            for index in 100..<120 {
                guard case .deadToken(410, .unregistered, let timestamp)? = state.finalOutcomes[index] else {
                    Issue.record("notification \(index): \(String(describing: state.finalOutcomes[index]))")
                    continue
                }
                // APNs' timestamp: milliseconds since the epoch when it learned the token was dead.
                let now = TimeSource.system.nowMilliseconds()
                #expect(timestamp.map { $0 > now - 600_000 && $0 <= now } == true, "timestamp \(String(describing: timestamp))")
            }
            for index in 120..<140 { #expect(state.finalOutcomes[index] == .retryTokenLater(reason: .tooManyRequests)) }
            #expect(state.emulator.accepted == 100 && state.emulator.duplicates == 0, "\(state)")
            #expect(state.emulator.rejected == ["Unregistered": 20, "TooManyRequests": 20], "\(state)")
            #expect(state.disagreements == 0)
        }

        /// APNs reads a missing apns-priority as 10, which a background push may not use: Herald
        /// sends the push type's default (5) itself, so a background job without a priority is taken.
        @Test
        func backgroundPushWithoutPriorityIsSentAtFive() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                try bed.startPool(connections: 1, maxStreams: 10)
                let batch = (0..<5).map { index in
                    APNs.Notification(
                        deviceToken: TestBed.deviceToken(index: index, prefix: "b9"), topic: TestBed.topic, pushType: .background,
                        apnsID: bed.apnsID(index: index), payload: Array(#"{"aps":{"content-available":1}}"#.utf8))
                }
                bed.recorder.enqueue(batch)
                bed.recorder.feed(bed.pool)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "\(state)")
            #expect(state.tally == ["accepted": 5], "\(state)")
            #expect(state.emulator.rejected.isEmpty, "\(state)")
        }

        @Test
        func badDeviceTokenIsReportedNotRetried() async throws {
            let bed = try await TestBed { $0.injectedErrors = [InjectedError(status: 400, reason: "BadDeviceToken", rate: 1)] }
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 50)
                bed.enqueue(10)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "\(state)")
            #expect(state.tally == ["deadToken(400 BadDeviceToken)": 10], "\(state)")
            #expect(state.finalAttempts.allSatisfy { $0 == 1 }, "never retried: \(state.finalAttempts)")
            #expect(state.emulator.streams == 10 && state.emulator.rejected == ["BadDeviceToken": 10], "\(state)")
            #expect(state.emulator.accepted == 0)
        }

        /// A token signed with a key APNs does not know. The first 403 InvalidProviderToken only
        /// makes the credentials suspect: that connection is replaced by a fresh one with a fresh
        /// token, and it is the rejections there that halt the app. Nothing is lost on the way.
        @Test
        func invalidProviderTokenHaltsOnlyAfterAFreshConnectionRejectsItToo() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let otherKey = try ES256PrivateKey.generate()
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 50, tokenKey: otherKey) { $0.firstProbeDelayMilliseconds = 600_000 }
                bed.enqueue(50)
            }
            // Notifications keep coming after the first rejection, as from a worker's queue.
            var fed = 50
            var halted = false
            for _ in 0..<20 where !halted {
                halted = await bed.waitUntil(timeout: .milliseconds(500)) { bed in
                    !bed.recorder.stoppedReasons.isEmpty && bed.pool.connections.allSatisfy { $0.inFlight == 0 }
                }
                if !halted {
                    try await bed.onLoop { bed in bed.enqueue(10) }
                    fed += 10
                }
            }
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(halted, "\(state)")
            let total = fed
            let (handedBack, freeSlots, sendTaken, suspicions, isHalted) = try await bed.onLoop { bed in
                let queued = bed.pool.takeQueuedResends()
                let taken = bed.pool.send(PendingRequest(notification: bed.notification(index: total), context: UInt64(total)))
                return (queued.map(\.context), bed.pool.freeSlots, taken, bed.pool.credentialSuspicions, bed.pool.isHalted)
            }
            #expect(state.stoppedReasons.count == 1, "\(state.stoppedReasons)")
            #expect(state.stoppedReasons.first?.contains("fresh connection") == true, "\(state.stoppedReasons)")
            #expect(isHalted && state.poolStoppedReason != nil)
            #expect(suspicions == 1, "one suspicion, then the fresh connection decided")
            #expect(state.emulator.connections >= 3, "a fresh connection was opened to check: \(state)")
            #expect(freeSlots == 0 && !sendTaken, "a halted pool takes nothing")
            let rejected = state.count(of: .credentialsRejected(status: 403, reason: .invalidProviderToken))
            #expect(rejected >= 1 + ConnectionPool.freshRejectionsToHalt, "\(state)")
            #expect(state.finals == rejected, "only credential rejections are final: \(state)")
            #expect(state.finalAttempts.allSatisfy { $0 == 0 }, "credential faults spend no attempt: \(state.finalAttempts)")
            // Every notification is accounted for: answered 403, handed back by the pool, or never handed over.
            #expect(rejected + handedBack.count + state.heldByCaller == total, "\(state), handed back \(handedBack)")
            #expect(state.emulator.accepted == 0, "\(state)")
            #expect(state.emulator.rejected == ["InvalidProviderToken": rejected], "\(state)")
        }

        /// APNs answers 403 InvalidProviderToken to a few single requests while accepting the rest
        /// (as it did when one request's headers were cut short): the app never halts.
        @Test
        func occasionalCredentialRejectionsNeverHaltTheApp() async throws {
            let bed = try await TestBed { $0.injectedErrors = [InjectedError(status: 403, reason: "InvalidProviderToken", rate: 0.02)] }
            defer { bed.shutdown() }
            let count = 2_000
            try await bed.onLoop { bed in
                try bed.startPool(connections: 4, maxStreams: 50)
                bed.enqueue(count)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            let (suspicions, halts) = try await bed.onLoop { ($0.pool.credentialSuspicions, $0.pool.halts) }
            try #require(finished, "\(state)")
            let rejected = state.count(of: .credentialsRejected(status: 403, reason: .invalidProviderToken))
            #expect(state.stoppedReasons.isEmpty && halts == 0, "\(state)")
            #expect(rejected > 0 && suspicions >= 1, "the emulator did reject some: \(state)")
            #expect(state.accepted + rejected == count, "\(state)")
            #expect(state.emulator.accepted == state.accepted && state.emulator.rejected == ["InvalidProviderToken": rejected], "\(state)")
        }

        /// A halted app probes again by itself, with backoff, reloading its key file each time:
        /// fixing the file brings it back without a restart.
        @Test
        func haltedAppProbesAndResumesOnceTheKeyFileIsFixed() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let keyFile = bed.directory.path("AuthKey.p8")
            try ES256PrivateKey.generateP8().write(toFile: keyFile, atomically: true, encoding: .utf8)
            let wrongKey = try ES256PrivateKey(pem: String(contentsOfFile: keyFile, encoding: .utf8))
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 20, tokenKey: wrongKey) {
                    $0.firstProbeDelayMilliseconds = 200
                    $0.maximumProbeIntervalMilliseconds = 400
                }
                bed.pool.credentialsReloader = {
                    let key = try ES256PrivateKey(pem: String(contentsOfFile: keyFile, encoding: .utf8))
                    return try ProviderTokenSigner(teamID: TestBed.teamID, keyID: TestBed.keyID, key: key)
                }
                bed.enqueue(200)
            }
            let haltedOnce = await bed.waitUntil(timeout: .seconds(20)) { $0.pool.halts >= 1 }
            try #require(haltedOnce)
            // More work arrives while halted; a probe takes one notification and is refused (the
            // file is still wrong), and the app halts again.
            try await bed.onLoop { bed in bed.enqueue(50) }
            let refusedAgain = await bed.waitUntil(timeout: .seconds(20)) { $0.pool.halts >= 2 }
            let halted = try await bed.onLoop { $0.snapshot() }
            try #require(refusedAgain, "\(halted)")
            #expect(halted.emulator.accepted == 0)
            try bed.providerKeyPEM.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let resumed = await bed.waitUntil(timeout: .seconds(20)) { $0.recorder.acceptedCount > 0 && !$0.pool.isHalted }
            try await bed.onLoop { bed in bed.enqueue(100) }
            let finished = await bed.waitForAllOutcomes(timeout: .seconds(30))
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(resumed && finished, "\(state)")
            let rejected = state.count(of: .credentialsRejected(status: 403, reason: .invalidProviderToken))
            #expect(state.accepted + rejected == 350, "every notification answered: \(state)")
            #expect(state.accepted >= 100, "\(state)")
            #expect(state.emulator.accepted == state.accepted, "\(state)")
            #expect(state.poolStoppedReason == nil, "\(state)")
        }

        /// A notification whose headers do not fit the 16 KiB header area (built here directly,
        /// past the job decoder's limits) is never sent with a header cut short: it fails alone as
        /// `RequestHeadersTooLarge`, APNs never sees it, the credentials are never doubted, and
        /// the notifications after it on the same connection are delivered.
        @Test
        func headersThatDoNotFitAreNeverSentCutShort() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                try bed.startPool(connections: 1, maxStreams: 10)
                let oversized = APNs.Notification(
                    deviceToken: String(repeating: "ab", count: 8_300), topic: TestBed.topic, pushType: .alert,
                    apnsID: bed.apnsID(index: 0), payload: Array(#"{"aps":{"alert":"too big"}}"#.utf8))
                bed.recorder.enqueue([oversized])
                bed.enqueue(20)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            let suspicions = try await bed.onLoop { $0.pool.credentialSuspicions }
            try #require(finished, "\(state)")
            #expect(state.count(of: .permanent(status: 0, reason: .requestHeadersTooLarge)) == 1, "\(state)")
            #expect(state.accepted == 20, "\(state)")
            #expect(state.emulator.streams == 20 && state.emulator.rejected.isEmpty, "APNs never saw it: \(state)")
            #expect(suspicions == 0 && state.connectionsOpened == 1, "\(state)")
        }

        /// A stream the server never answers is reset after the response deadline and comes back as
        /// `.responseTimeout`, an attempt with an unknown outcome; the connection keeps serving.
        @Test
        func streamsNeverAnsweredAreResetAtTheResponseDeadline() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                var faults = bed.server.faults
                faults.stallNext = 3
                bed.server.setFaults(faults)
                try bed.startPool(connections: 1, maxStreams: 10) { $0.responseTimeoutMilliseconds = 300 }
                bed.enqueue(30)
            }
            let finished = await bed.waitForAllOutcomes(timeout: .seconds(20))
            let state = try await bed.onLoop { $0.snapshot() }
            let timeouts = try await bed.onLoop { $0.pool.responseTimeouts }
            try #require(finished, "\(state)")
            let timedOut = state.count(of: .retryOnAnotherConnection(.responseTimeout))
            #expect(timedOut == 3 && timeouts == 3, "\(state)")
            #expect(state.accepted == 27, "\(state)")
            #expect(state.finalAttempts.allSatisfy { $0 == 1 }, "a timed-out stream counts as an attempt")
            #expect(state.connectionsOpened == 1 && state.connectionFailures == 0, "the connection stays: \(state)")
        }

        /// 503s come back to the caller with the attempt counted (its retry policy decides), and a
        /// connection stays up through them: no reconnect per 503.
        @Test
        func serviceUnavailableComesBackCountedWithoutReconnecting() async throws {
            let bed = try await TestBed { $0.injectedErrors = [InjectedError(status: 503, reason: "ServiceUnavailable", rate: 0.2)] }
            defer { bed.shutdown() }
            let count = 2_000
            try await bed.onLoop { bed in
                try bed.startPool(connections: 4, maxStreams: 50)
                bed.enqueue(count)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "\(state)")

            let unavailable = state.count(of: .retryOnAnotherConnection(.status(503, .serviceUnavailable)))
            #expect(state.finals == count && state.extraOutcomes == 0, "\(state)")
            #expect(unavailable > 0 && state.accepted + unavailable == count, "\(state)")
            #expect(state.emulator.accepted == state.accepted, "\(state)")
            #expect(state.emulator.duplicates == 0 && state.acceptedMoreThanOnce == 0, "\(state)")
            #expect(state.disagreements == 0, "\(state)")
            #expect(state.poolResends == 0, "the pool resends only what APNs never processed: \(state)")
            #expect(state.finalAttempts.allSatisfy { $0 == 1 }, "\(state)")
            #expect(state.emulator.connections == 4 && state.connectionFailures == 0, "no reconnect for a 503: \(state)")
            #expect(state.emulator.rejected == ["ServiceUnavailable": unavailable], "\(state)")
        }
    }
}
