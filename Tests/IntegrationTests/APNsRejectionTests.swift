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

        /// A token signed with a key APNs does not know: 403 InvalidProviderToken stops the app's
        /// sending; the requests in flight come back, and the rest never leave the caller.
        @Test
        func invalidProviderTokenStopsSendingAndLosesNothing() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let count = 50
            let otherKey = try ES256PrivateKey.generate()
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 50, tokenKey: otherKey)
                bed.enqueue(count)
            }
            let settled = await bed.waitUntil(timeout: .seconds(10)) { bed in
                !bed.recorder.stoppedReasons.isEmpty && bed.pool.connections.allSatisfy { $0.inFlight == 0 }
            }
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(settled, "\(state)")
            let (handedBack, freeSlots, sendTaken) = try await bed.onLoop { bed in
                let queued = bed.pool.takeQueuedResends()
                let taken = bed.pool.send(PendingRequest(notification: bed.notification(index: count), context: UInt64(count)))
                return (queued.map(\.context), bed.pool.freeSlots, taken)
            }

            #expect(state.stoppedReasons.count == 1, "\(state.stoppedReasons)")
            #expect(state.poolStoppedReason != nil)
            #expect(freeSlots == 0 && !sendTaken, "a stopped pool takes nothing")
            let rejected = state.count(of: .credentialsRejected(status: 403, reason: .invalidProviderToken))
            #expect(rejected >= 1, "\(state)")
            #expect(state.finals == rejected, "only credential rejections are final: \(state)")
            // Every notification is accounted for: answered 403, handed back by the pool, or never handed over.
            #expect(rejected + handedBack.count + state.heldByCaller == count, "\(state), handed back \(handedBack)")
            #expect(state.handOvers == rejected + handedBack.count, "\(state)")
            #expect(state.emulator.accepted == 0, "\(state)")
            #expect(state.emulator.rejected == ["InvalidProviderToken": rejected], "\(state)")
        }

        @Test
        func serviceUnavailableRetriedOnAnotherConnection() async throws {
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
            #expect(state.accepted + unavailable == count, "only 200 or 503 after the pool's retries: \(state)")
            #expect(state.emulator.accepted == state.accepted, "\(state)")
            #expect(state.emulator.duplicates == 0 && state.acceptedMoreThanOnce == 0, "\(state)")
            #expect(state.disagreements == 0, "\(state)")
            // The pool retried on its own, and retries succeeded.
            #expect(state.poolResends > 0, "\(state)")
            let acceptedAfterRetry = zip(state.finalOutcomes, state.finalAttempts).filter { $0.0 == .accepted && $0.1 > 1 }.count
            #expect(acceptedAfterRetry > 0, "\(state)")
            // At most the first attempt and `immediateRetries` (2) more.
            #expect(state.finalAttempts.allSatisfy { $0 <= 3 }, "\(state)")
            #expect((state.emulator.rejected["ServiceUnavailable"] ?? 0) >= unavailable + acceptedAfterRetry, "\(state)")
            #expect(state.emulator.rejected.keys.sorted() == ["ServiceUnavailable"], "\(state)")
        }
    }
}
