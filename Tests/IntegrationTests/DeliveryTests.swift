import APNs
import MockAPNs
import Testing
@_spi(Testing) import Transport
import Worker

extension IntegrationTests {
    /// Volume, stream limits and connection churn: every notification is counted on both sides.
    @Suite
    struct Delivery {
        @Test
        func thousandsMultiplexedOverFewConnections() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let count = 20_000
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 500)
                bed.enqueue(count)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "not every notification reached an outcome: \(state)")

            #expect(state.finals == count && state.extraOutcomes == 0, "\(state)")
            #expect(state.accepted == count, "\(state)")
            #expect(state.acceptedOnce == count && state.acceptedMoreThanOnce == 0, "\(state)")
            #expect(state.emulator.accepted == count && state.emulator.duplicates == 0, "\(state)")
            #expect(state.emulator.rejectedTotal == 0, "\(state)")
            #expect(state.disagreements == 0)
            // Two connections, kept open: a reconnect or two at most.
            #expect(state.emulator.connections <= 4, "\(state)")
            // Multiplexing: many streams at once on one connection, never more than Herald's cap.
            #expect(state.maxInFlightOnOneConnection > 1, "\(state)")
            #expect(state.maxInFlightOnOneConnection <= 500, "\(state)")
        }

        /// Starts a pool of one connection (100 streams) and delivers `count` notifications.
        static func deliverOnOneConnection(_ count: Int, _ bed: TestBed) async throws {
            try await bed.onLoop { bed in try bed.startPool(connections: 1, maxStreams: 100) }
            try await deliver(count, bed)
        }

        /// Enqueues `count` notifications and waits until every one has an outcome.
        static func deliver(_ count: Int, _ bed: TestBed) async throws {
            try await bed.onLoop { bed in bed.enqueue(count) }
            #expect(await bed.waitForAllOutcomes())
        }

        /// Between benchmark runs the emulator may forget the apns-ids it accepted: the table
        /// empties, every count stays, and counting goes on as before.
        @Test
        func emulatorForgetsAcceptedIDsButKeepsCounts() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await Self.deliverOnOneConnection(50, bed)
            let before = try await bed.onLoop { bed -> (Int, Int, Int) in
                let counts = bed.server.currentStatistics
                let timesBefore = bed.server.acceptedCount(apnsID: bed.apnsID(index: 0))
                bed.server.forgetAcceptedIDs()
                return (counts.acceptedUnique, timesBefore, bed.server.currentStatistics.acceptedUnique)
            }
            #expect(before.1 == 1, "the id was recorded before the call")
            #expect(before.0 == 50 && before.2 == 50, "counts survive: \(before)")
            try await Self.deliver(10, bed)
            let after = try await bed.onLoop { bed in
                (bed.server.acceptedCount(apnsID: bed.apnsID(index: 0)), bed.server.acceptedCount(apnsID: bed.apnsID(index: 55)),
                 bed.server.currentStatistics.acceptedUnique, bed.server.currentStatistics.duplicates)
            }
            #expect(after.0 == 0, "ids accepted before the call are forgotten")
            #expect(after.1 == 1 && after.2 == 60 && after.3 == 0, "\(after)")
        }

        /// Benchmarks pair a run at latency L with one at 0 ms on the same emulator: the added round
        /// trip changes for requests that arrive after the call.
        @Test
        func emulatorLatencyCanBeChangedBetweenRuns() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                try bed.startPool(connections: 1, maxStreams: 100)
                bed.server.setLatency(milliseconds: 300)
            }
            let started = ContinuousClock.now
            try await Self.deliver(10, bed)
            // A lower bound only: on a loaded machine answers can be later, never earlier.
            #expect(ContinuousClock.now - started >= .milliseconds(300))
            let latency = try await bed.onLoop { bed -> Int64 in
                bed.server.setLatency(milliseconds: -5)
                return bed.server.latencyMilliseconds
            }
            #expect(latency == 0, "a negative latency is taken as none")
            try await Self.deliver(10, bed)
            #expect(try await bed.onLoop { bed in bed.server.currentStatistics.acceptedUnique } == 20)
        }

        /// The emulator sends each answer's `apns-id` without HPACK indexing: ids that differ in
        /// every answer would only churn the client's header table (an entry added and one
        /// evicted per answer, on both sides). Its table holds no apns-id after hundreds of answers.
        @Test
        func emulatorAnswersDoNotIndexTheirIDs() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await Self.deliverOnOneConnection(300, bed)
            let (size, accepted) = try await bed.onLoop { bed in
                (bed.pool.connections.first?.receivedHeaderTableSize ?? -1, bed.server.currentStatistics.acceptedUnique)
            }
            #expect(accepted == 300)
            // One indexed id would take 7 + 36 + 32 = 75 bytes.
            #expect(size >= 0 && size < 75, "the client's table holds \(size) bytes")
        }

        /// A connection has 2^30 client stream ids; a busy one uses them up in hours. It is then
        /// retired like a GOAWAY and replaced, and nothing is lost or sent twice.
        @Test
        func connectionOutOfStreamIDsIsRetiredAndReplaced() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            try await Self.deliverOnOneConnection(50, bed)
            // Jump to the last odd stream id: one more stream, then the id space is spent.
            let moved = try await bed.onLoop { bed in bed.pool.connections.first?.setNextStreamID(Int32.max) ?? false }
            #expect(moved)
            try await Self.deliver(200, bed)
            let state = try await bed.onLoop { bed in
                (opened: bed.pool.connectionsOpened, accepted: bed.server.currentStatistics.acceptedUnique,
                 duplicates: bed.server.currentStatistics.duplicates)
            }
            #expect(state.opened == 2, "the spent connection was replaced once: \(state)")
            #expect(state.accepted == 250 && state.duplicates == 0, "\(state)")
        }

        @Test
        func streamLimitStartsAtOneAndRises() async throws {
            let bed = try await TestBed { $0.maxStreams = 300 }
            defer { bed.shutdown() }
            let count = 3_000
            try await bed.onLoop { bed in
                try bed.startPool(connections: 1, maxStreams: 500)
                bed.enqueue(count)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "not every notification reached an outcome: \(state)")

            // APNs (and the emulator) allow one stream until a request with a valid token succeeds.
            #expect(!state.limitsWhenReady.isEmpty, "\(state)")
            #expect(state.limitsWhenReady.allSatisfy { $0 == 1 }, "peer limits when ready: \(state.limitsWhenReady)")
            #expect(state.slotsWhenReady.allSatisfy { $0 <= 1 }, "slots when ready: \(state.slotsWhenReady)")
            #expect(state.maxInFlightBeforeFirstAnswer == 1, "\(state)")
            // The emulator raised the limit with the first 200 (its SETTINGS precede that answer).
            #expect(state.limitsAtFirstAccepted == [300], "limits at the first 200: \(String(describing: state.limitsAtFirstAccepted))")
            #expect(state.peerLimits.allSatisfy { $0 == 300 }, "\(state)")
            // Herald used the raised limit but never exceeded the peer's (below its own cap of 500).
            #expect(state.maxInFlightOnOneConnection == 300, "\(state)")
            #expect(state.accepted == count && state.acceptedOnce == count, "\(state)")
            #expect(state.emulator.accepted == count && state.emulator.duplicates == 0, "\(state)")
        }

        @Test
        func goAwayMidFlightLosesNothing() async throws {
            let bed = try await TestBed { $0.goAwayAfterStreams = 700 }
            defer { bed.shutdown() }
            let count = 10_000
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 200)
                bed.enqueue(count)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "not every notification reached an outcome: \(state)")

            #expect(state.finals == count && state.extraOutcomes == 0, "\(state)")
            #expect(state.accepted == count, "\(state)")
            #expect(state.acceptedOnce == count, "\(state)")
            #expect(state.emulator.accepted == count, "\(state)")
            #expect(state.emulator.duplicates == 0, "\(state)")
            #expect(state.disagreements == 0, "\(state)")
            #expect(state.emulator.goAwaysSent >= 1, "\(state)")
            #expect(state.goAwaysReceived >= 1, "\(state)")
            #expect(state.connectionsOpened > 2, "\(state)")
        }

        @Test
        func droppedConnectionIsReestablished() async throws {
            let bed = try await TestBed { $0.disconnectAfterStreams = 500 }
            defer { bed.shutdown() }
            let count = 3_000
            try await bed.onLoop { bed in
                // When both connections are down at once the pool hands back what it held; the
                // caller resends it, as Herald's pipeline does.
                try bed.startPool(connections: 2, maxStreams: 100, retryPolicy: .resend(upTo: 5))
                bed.enqueue(count)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "not every notification reached an outcome: \(state)")

            #expect(state.finals == count && state.extraOutcomes == 0, "\(state)")
            #expect(state.accepted == count, "\(state)")
            #expect(state.emulator.acceptedUnique == count, "\(state)")
            #expect(state.neverAccepted == 0 && state.disagreements == 0, "\(state)")
            #expect(state.emulator.disconnects >= 1, "\(state)")
            #expect(state.connectionsOpened > 2, "\(state)")
            // A duplicate is possible only for a request in flight when its connection dropped
            // (answered by the emulator, answer lost with the connection), so only for resends.
            #expect(state.emulator.duplicates <= state.poolResends + state.callerResends, "\(state)")
        }
    }
}
