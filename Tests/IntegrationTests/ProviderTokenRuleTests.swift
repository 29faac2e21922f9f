import APNs
import MockAPNs
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// The provider-token rules APNs enforces (an hour's life, one change per connection per 20
    /// minutes), on a manual clock shared by the emulator and the client's token source.
    @Suite
    struct ProviderTokenRules {
        /// A wall clock in 2025, moved by hand.
        static func manualClock() -> ManualTime { ManualTime(milliseconds: 1_750_000_000_000) }
        static let maintenanceMilliseconds: Int64 = 20

        /// Advances the shared clock, then lets the pool's maintenance timer fire at least once
        /// (its next deadline is at most one interval away), as it would many times in real time.
        static func advance(_ clock: ManualTime, by duration: Duration, bed: TestBed) async {
            clock.advance(by: duration)
            await bed.letTimersRun(milliseconds: 3 * maintenanceMilliseconds)
        }

        /// A test bed on `clock` with `connections` raw client connections, each ready, and a
        /// signer of the bed's provider key.
        static func rawBed(_ clock: ManualTime, connections: Int) async throws -> (TestBed, ProviderTokenSigner) {
            let bed = try await TestBed { $0.time = .manual(clock) }
            try await bed.onLoop { bed in
                for _ in 0..<connections { _ = try bed.connectRaw(trusting: bed.certificatePath) }
            }
            let ready = await bed.waitUntil(timeout: .seconds(10)) { bed in (0..<connections).allSatisfy { bed.probe.isReady($0) } }
            let description = try await bed.onLoop { $0.describe() }
            if !ready { bed.shutdown() }
            try #require(ready, "\(description)")
            return (bed, try ProviderTokenSigner(teamID: TestBed.teamID, keyID: TestBed.keyID, key: bed.providerKey))
        }

        /// Sends notification `index` on raw connection `connection` with provider token `jwt`, and
        /// waits for its outcome.
        static func send(_ index: Int, on connection: Int, jwt: String, clock: ManualTime, bed: TestBed) async throws -> DeliveryOutcome? {
            let submitted = try await bed.onLoop { bed in
                let raw = bed.rawConnections[connection]
                raw.clock = .manual(clock)
                raw.setAuthorization(jwt: jwt, generation: UInt64(index + 1))
                return raw.submit(PendingRequest(notification: bed.notification(index: index), context: UInt64(index)))
            }
            try #require(submitted, "connection \(connection) had no free stream")
            _ = await bed.waitUntil(timeout: .seconds(10)) { $0.probe.outcome(of: UInt64(index)) != nil }
            return try await bed.onLoop { $0.probe.outcome(of: UInt64(index)) }
        }

        static func sendBatch(_ count: Int, bed: TestBed) async throws {
            try await bed.onLoop { bed in bed.enqueue(count) }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "a batch did not finish: \(state)")
        }

        @Test
        func twentyMinuteRuleNeverBroken() async throws {
            let clock = Self.manualClock()
            let bed = try await TestBed { $0.time = .manual(clock) }
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                // 20 minutes, the shortest interval Herald allows: the most token changes.
                try bed.startPool(connections: 2, maxStreams: 50, refreshMinutes: 20, time: .manual(clock)) {
                    $0.maintenanceIntervalMilliseconds = Self.maintenanceMilliseconds
                }
            }
            try await Self.sendBatch(200, bed: bed)
            let mintedAtStart = try await bed.onLoop { $0.tokens!.mintCount }
            #expect(mintedAtStart == 1)

            await Self.advance(clock, by: .seconds(25 * 60), bed: bed)
            let mintedAfter25 = try await bed.onLoop { $0.tokens!.mintCount }
            #expect(mintedAfter25 == 2, "a token 25 minutes old is replaced when the interval is 20")
            try await Self.sendBatch(200, bed: bed)

            await Self.advance(clock, by: .seconds(10 * 60), bed: bed)
            try await Self.sendBatch(200, bed: bed)

            // Two hours and a quarter more, a batch every five simulated minutes.
            for _ in 0..<27 {
                await Self.advance(clock, by: .seconds(5 * 60), bed: bed)
                try await Self.sendBatch(100, bed: bed)
            }

            let state = try await bed.onLoop { $0.snapshot() }
            let minted = try await bed.onLoop { $0.tokens!.mintCount }
            let total = 600 + 27 * 100
            #expect(state.finals == total && state.extraOutcomes == 0, "\(state)")
            #expect(state.emulator.rejected.isEmpty, "the emulator refused tokens: \(state.emulator.rejected)")
            #expect(state.emulator.rejected["TooManyProviderTokenUpdates"] == nil)
            #expect(state.emulator.rejected["ExpiredProviderToken"] == nil)
            #expect(state.accepted == total && state.acceptedOnce == total, "\(state)")
            #expect(state.emulator.accepted == total && state.emulator.duplicates == 0, "\(state)")
            // 2 h 40 min at one token per 20 minutes at least.
            #expect(minted >= 7, "minted \(minted)")
            #expect(state.connectionsOpened == 2, "the connections were kept: \(state)")
        }

        /// Pushy issue #931: a connection that starts late on the current token and switches 20
        /// minutes after it was *bound*, not after it was first *used*, gets 429. Here a connection
        /// is replaced (so it is bound at once) and first carries a notification five minutes later.
        @Test
        func connectionFirstUsedLateKeepsItsTokenTwentyMinutes() async throws {
            let clock = Self.manualClock()
            let bed = try await TestBed { $0.time = .manual(clock) }
            defer { bed.shutdown() }
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 50, refreshMinutes: 20, time: .manual(clock)) {
                    $0.maintenanceIntervalMilliseconds = Self.maintenanceMilliseconds
                }
            }
            var sent = 0
            for _ in 0..<10 {
                try await Self.sendBatch(100, bed: bed)
                sent += 100
                await Self.advance(clock, by: .seconds(5 * 60), bed: bed)
            }
            // Drop one connection; its replacement is bound to the current token when it is ready.
            try await bed.onLoop { bed in bed.pool.connections.first!.close() }
            let replaced = await bed.waitUntil(timeout: .seconds(10)) { bed in
                bed.pool.readyConnections == 2 && bed.pool.connections.allSatisfy { $0.tokenGeneration != 0 }
            }
            try #require(replaced, "the pool did not replace the connection")
            // Only now does simulated time move on: the new connection's first use is later than its binding.
            for _ in 0..<14 {
                await Self.advance(clock, by: .seconds(5 * 60), bed: bed)
                try await Self.sendBatch(100, bed: bed)
                sent += 100
            }

            let state = try await bed.onLoop { $0.snapshot() }
            #expect(state.finals == sent && state.extraOutcomes == 0, "\(state)")
            #expect(state.emulator.rejected["TooManyProviderTokenUpdates"] == nil, "\(state)")
            #expect(state.emulator.rejected["ExpiredProviderToken"] == nil, "\(state)")
            #expect(state.accepted == sent && state.acceptedOnce == sent, "\(state)")
        }

        /// The emulator is the judge in the tests above: prove it refuses both violations.
        @Test
        func emulatorRefusesEarlyTokenChangeAndExpiredToken() async throws {
            let clock = Self.manualClock()
            let (bed, signer) = try await Self.rawBed(clock, connections: 2)
            defer { bed.shutdown() }

            /// Binds a token issued `age` seconds ago to raw connection `connection` and sends notification `index`.
            func send(_ index: Int, on connection: Int, tokenAge age: Int64 = 0) async throws -> DeliveryOutcome? {
                let jwt = try signer.makeToken(issuedAt: clock.nowMilliseconds() / 1000 - age)
                return try await Self.send(index, on: connection, jwt: jwt, clock: clock, bed: bed)
            }

            #expect(try await send(0, on: 0) == .accepted)
            clock.advance(by: .seconds(5 * 60))
            // A new token five minutes after the first use of the previous one on this connection.
            #expect(try await send(1, on: 0) == .providerTokenUpdatesThrottled)
            clock.advance(by: .seconds(16 * 60))
            // Twenty-one minutes after that first use the change is allowed.
            #expect(try await send(2, on: 0) == .accepted)
            // A token issued over an hour ago.
            #expect(try await send(3, on: 1, tokenAge: 3_700) == .refreshProviderToken)

            let statistics = try await bed.onLoop { $0.server.currentStatistics }
            #expect(statistics.rejected == ["TooManyProviderTokenUpdates": 1, "ExpiredProviderToken": 1])
            #expect(statistics.accepted == 2)
        }

        /// The emulator compares a token with the connection's current one byte for byte: the same
        /// token with each `K` spelled as the Kelvin sign (U+212A, equal to `K` as Unicode text) is
        /// another token, and not a valid one.
        @Test
        func aTokenSpelledWithOtherBytesIsAnotherToken() async throws {
            let clock = Self.manualClock()
            let (bed, signer) = try await Self.rawBed(clock, connections: 1)
            defer { bed.shutdown() }
            // A signature is random: sign until the token has a `K` to respell (1 in 4 has none).
            var jwt = ""
            for _ in 0..<64 where !jwt.contains("K") {
                jwt = try signer.makeToken(issuedAt: clock.nowMilliseconds() / 1000)
            }
            try #require(jwt.contains("K"))
            let respelled = String(jwt.map { $0 == "K" ? "\u{212A}" : $0 })
            #expect(respelled == jwt, "Swift compares them equal as text")
            #expect(Array(respelled.utf8) != Array(jwt.utf8))

            func send(_ index: Int, token: String) async throws -> DeliveryOutcome? {
                try await Self.send(index, on: 0, jwt: token, clock: clock, bed: bed)
            }
            #expect(try await send(0, token: jwt) == .accepted)
            #expect(try await send(1, token: respelled) == .credentialsRejected(status: 403, reason: .invalidProviderToken))
            #expect(try await send(2, token: jwt) == .accepted, "the current token is still the first one")
            let statistics = try await bed.onLoop { $0.server.currentStatistics }
            #expect(statistics.rejected == ["InvalidProviderToken": 1])
            #expect(statistics.accepted == 2)
        }
    }
}
