import APNs
import Foundation
import MockAPNs
import Testing
import Transport

extension IntegrationTests {
    /// The emulator's injected faults, checked from the client's side: Herald's own `APNsConnection`
    /// (and curl, a second HTTP/2 client, where the bytes of a body matter) against the emulator
    /// over TLS and HTTP/2, with the emulator's counts of each fault.
    @Suite
    struct EmulatorFaults {
        @Test
        func maxStreamsDropsOnOpenConnectionsAndOnNewOnes() async throws {
            let bed = try await TestBed { $0.maxStreams = 1000 }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1)
            #expect(try await bed.sendRaw(0, on: 0, jwt: jwt) == .accepted)
            try #require(await bed.waitUntil(timeout: .seconds(10)) { $0.rawConnections[0].peerMaxConcurrentStreams == 1000 })

            let (status, faults) = try await bed.control("max-streams/1")
            #expect(status == 200 && faults.contains("\"max_streams\":1,"), "\(faults)")
            let lowered = await bed.waitUntil(timeout: .seconds(10)) { $0.rawConnections[0].peerMaxConcurrentStreams == 1 }
            #expect(lowered, "the open connection was told SETTINGS_MAX_CONCURRENT_STREAMS 1")
            #expect(try await bed.sendRaw(1, on: 0, jwt: jwt) == .accepted, "one stream at a time still works")

            // A connection opened now starts at 1, as always, and rises to the new limit, not to --max-streams.
            _ = try await bed.control("max-streams/3")
            try await bed.openRawConnections(1)
            #expect(try await bed.onLoop { $0.rawConnections[1].peerMaxConcurrentStreams } == 1)
            #expect(try await bed.sendRaw(2, on: 1, jwt: jwt) == .accepted)
            let raised = await bed.waitUntil(timeout: .seconds(10)) {
                $0.rawConnections[1].peerMaxConcurrentStreams == 3 && $0.rawConnections[0].peerMaxConcurrentStreams == 3
            }
            let statistics = try await bed.statistics()
            #expect(raised, "\(statistics.json())")
            // One SETTINGS per change to each connection past its first valid request: two to the first, none to the second.
            #expect(statistics.settingsSent == 2 && statistics.accepted == 3, "\(statistics.json())")
        }

        @Test
        func stalledStreamsGetNoAnswerWhilePingsAndOtherStreamsDo() async throws {
            let bed = try await TestBed { $0.faults.stallNext = 3 }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1) { connection in
                connection.pingIntervalMilliseconds = 200
                // The client checks again this long after each PING it sends, answered or not.
                connection.pingTimeoutMilliseconds = 1_000
            }
            // The first request is stalled, but it was valid: the connection still rises past one stream.
            #expect(try await bed.submitRaw(0..<1, on: 0, jwt: jwt) == 1)
            try #require(await bed.waitUntil(timeout: .seconds(10)) { $0.rawConnections[0].peerMaxConcurrentStreams == 1000 })
            #expect(try await bed.submitRaw(1..<6, on: 0, jwt: jwt) == 5)
            let answered = await bed.waitUntil(timeout: .seconds(10)) { bed in (3..<6).allSatisfy { bed.probe.outcome(of: UInt64($0)) != nil } }
            // PING round trips while three streams wait.
            let pinged = await bed.waitUntil(timeout: .seconds(10)) { $0.server.currentStatistics.pingsAnswered >= 2 }
            let (events, inFlight, statistics) = try await bed.onLoop { bed in
                (bed.probe.events.map(\.description), bed.rawConnections[0].inFlight, bed.server.currentStatistics)
            }
            #expect(answered && pinged, "\(events) \(statistics.json())")
            for index in 3..<6 { #expect(try await bed.onLoop { $0.probe.outcome(of: UInt64(index)) } == .accepted) }
            for index in 0..<3 { #expect(try await bed.onLoop { $0.probe.outcome(of: UInt64(index)) } == nil, "stream \(index) was answered") }
            #expect(try await bed.onLoop { $0.probe.closeError(of: 0) } == nil, "the connection stayed up: \(events)")
            #expect(inFlight == 3)
            #expect(statistics.streamsStalled == 3 && statistics.streamsOpen == 3 && statistics.accepted == 3, "\(statistics.json())")
            #expect(statistics.pingsIgnored == 0)

            // Nothing of the stalled streams outlives their connection.
            try await bed.onLoop { $0.rawConnections[0].close() }
            let released = await bed.waitUntil(timeout: .seconds(10)) { bed in
                let now = bed.server.currentStatistics
                return now.connectionsOpen == 0 && now.streamsOpen == 0
            }
            let afterClose = try await bed.statistics()
            #expect(released, "\(afterClose.json())")
        }

        @Test
        func aShareOfStreamsStallsWhenSwitchedOnWhileRunning() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1, maxStreams: 200)
            #expect(try await bed.sendRaw(0, on: 0, jwt: jwt) == .accepted)
            try #require(await bed.waitUntil(timeout: .seconds(10)) { $0.rawConnections[0].peerMaxConcurrentStreams == 1000 })
            let (status, _) = try await bed.control("stall/0.3")
            #expect(status == 200)
            #expect(try await bed.submitRaw(1..<201, on: 0, jwt: jwt) == 200)
            let settled = await bed.waitUntil(timeout: .seconds(20)) { bed in
                let now = bed.server.currentStatistics
                return now.accepted + now.streamsStalled == 201 && bed.rawConnections[0].inFlight == now.streamsStalled
            }
            let statistics = try await bed.statistics()
            try #require(settled, "\(statistics.json())")
            // 200 draws at 0.3: far outside 30 ± 5 standard deviations only by a broken draw.
            #expect((25...95).contains(statistics.streamsStalled), "\(statistics.json())")
            #expect(statistics.accepted + statistics.streamsStalled == 201, "every stream answered or stalled: \(statistics.json())")
            #expect(statistics.streamsOpen == statistics.streamsStalled)

            _ = try await bed.control("stall/0")
            #expect(try await bed.sendRaw(201, on: 0, jwt: jwt) == .accepted, "switched off, streams are answered again")
        }

        @Test
        func ignoredPingsMakeTheClientGiveUpUntilSwitchedOff() async throws {
            let bed = try await TestBed { $0.faults.ignorePing = true }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            let short: @Sendable (APNsConnection) -> Void = { connection in
                connection.pingIntervalMilliseconds = 200
                connection.pingTimeoutMilliseconds = 500
            }
            try await bed.openRawConnections(1, configure: short)
            #expect(try await bed.sendRaw(0, on: 0, jwt: jwt) == .accepted, "requests are still answered")
            let closed = await bed.waitUntil(timeout: .seconds(10)) { $0.probe.closeError(of: 0) != nil }
            let events = try await bed.onLoop { $0.probe.events.map(\.description) }
            try #require(closed, "\(events)")
            let error = try await bed.onLoop { $0.probe.closeError(of: 0) }
            guard case .pingUnanswered?? = error else {
                Issue.record("closed for another reason: \(events)")
                return
            }
            var statistics = try await bed.statistics()
            #expect(statistics.pingsIgnored >= 1 && statistics.pingsAnswered == 0, "\(statistics.json())")

            let (status, faults) = try await bed.control("ignore-ping/off")
            #expect(status == 200 && faults.contains("\"ignore_ping\":false"), "\(faults)")
            try await bed.openRawConnections(1, configure: short)
            let answered = await bed.waitUntil(timeout: .seconds(10)) { $0.server.currentStatistics.pingsAnswered >= 3 }
            statistics = try await bed.statistics()
            #expect(answered, "\(statistics.json())")
            #expect(try await bed.onLoop { $0.probe.closeError(of: 1) } == nil, "a connection whose PINGs are answered stays up")
        }

        /// A server that takes DATA but never opens its flow-control window again: the connection
        /// opens no stream past what the window carries (the rest wait with the caller), the one
        /// stream cut short times out, and once the window has stayed shut with no stream open for
        /// a response timeout the connection closes itself, so a pool would open a fresh one
        /// instead of keeping a connection that can never send again.
        @Test
        func aWindowThatNeverOpensAgainClosesTheConnection() async throws {
            let bed = try await TestBed { $0.faults.withholdWindow = true }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1, maxStreams: 100) { connection in
                connection.responseTimeoutMilliseconds = 300
                connection.pingIntervalMilliseconds = 200
            }
            // One stream until the first valid request, as APNs does: it takes a small payload.
            #expect(try await bed.sendRaw(100, on: 0, jwt: jwt) == .accepted)
            // 4,000-byte payloads: the rest of the 65,535-byte window carries 16 and part of the 17th.
            let taken = try await bed.onLoop { bed in
                let raw = bed.rawConnections[0]
                raw.setAuthorization(jwt: jwt, generation: 1)
                var taken = 0
                while raw.streamSlots > 0 && taken < 40 {
                    var notification = bed.notification(index: taken)
                    let padding = String(repeating: "x", count: 4_000 - #"{"aps":{"alert":""}}"#.utf8.count)
                    notification.payload = ArraySlice(#"{"aps":{"alert":"\#(padding)"}}"#.utf8)
                    #expect(raw.submit(PendingRequest(notification: notification, context: UInt64(taken))))
                    taken += 1
                }
                return taken
            }
            #expect(taken == 17, "the window carries 16 payloads and part of the 17th")
            let closed = await bed.waitUntil(timeout: .seconds(10)) { $0.probe.closeError(of: 0) != nil }
            let events = try await bed.onLoop { $0.probe.events.map(\.description) }
            try #require(closed, "\(events)")
            let accepted = try await bed.onLoop { bed in (0..<16).filter { bed.probe.outcome(of: UInt64($0)) == .accepted }.count }
            #expect(accepted == 16, "\(events)")
            let cut = try await bed.onLoop { $0.probe.outcome(of: 16) }
            #expect(cut == .retryOnAnotherConnection(.responseTimeout), "\(events)")
            let error = try await bed.onLoop { $0.probe.closeError(of: 0) }
            guard case .timedOut(let what)?? = error, what.contains("flow-control window") else {
                Issue.record("closed for another reason: \(events)")
                return
            }
            let statistics = try await bed.statistics()
            #expect(statistics.accepted == 17 && statistics.pingsAnswered >= 1, "PINGs answered all along: \(statistics.json())")
        }

        @Test(arguments: [("INTERNAL_ERROR", RetryCause.streamReset(errorCode: 2)), ("REFUSED_STREAM", RetryCause.refusedStream)])
        func resetStreamsCarryTheChosenErrorCode(code: String, cause: RetryCause) async throws {
            let bed = try await TestBed { $0.faults.reset = InjectedReset(argument: "\(code):1") }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1)
            for index in 0..<5 {
                #expect(try await bed.sendRaw(index, on: 0, jwt: jwt) == .retryOnAnotherConnection(cause))
            }
            var statistics = try await bed.statistics()
            #expect(statistics.streamsReset == 5 && statistics.accepted == 0 && statistics.rejectedTotal == 0, "\(statistics.json())")

            _ = try await bed.control("reset-streams/off")
            #expect(try await bed.sendRaw(5, on: 0, jwt: jwt) == .accepted)
            // A share, switched on while running, with a code given by number (CANCEL).
            let (status, faults) = try await bed.control("reset-streams/8:0.5")
            #expect(status == 200 && faults.contains("\"error_code\":\"CANCEL\""), "\(faults)")
            try await bed.openRawConnections(1, maxStreams: 100)
            // The new connection allows one stream until a valid request was answered (or reset) on it.
            _ = try await bed.sendRaw(6, on: 1, jwt: jwt)
            try #require(await bed.waitUntil(timeout: .seconds(10)) { $0.rawConnections[1].peerMaxConcurrentStreams == 1000 })
            #expect(try await bed.submitRaw(7..<107, on: 1, jwt: jwt) == 100)
            let done = await bed.waitUntil(timeout: .seconds(20)) { bed in (6..<107).allSatisfy { bed.probe.outcome(of: UInt64($0)) != nil } }
            statistics = try await bed.statistics()
            try #require(done, "\(statistics.json())")
            let cancelled = try await bed.onLoop { bed in
                (6..<107).filter { bed.probe.outcome(of: UInt64($0)) == .retryOnAnotherConnection(.streamReset(errorCode: 8)) }.count
            }
            #expect((20...80).contains(cancelled), "101 draws at 0.5: \(cancelled)")
            #expect(statistics.streamsReset == 5 + cancelled && statistics.accepted == 1 + 101 - cancelled, "\(statistics.json())")
        }

        /// Each kind of garbage body, read by curl (Herald's client keeps only the first 4 KiB of a body).
        @Test
        func garbageBodiesReplaceErrorBodies() async throws {
            try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 is needed to read whole bodies")
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let port = try await bed.onLoop { $0.server.port }
            let directory = try TemporaryDirectory(prefix: "herald-garbage")
            /// A GET on a device path: APNs answers 405 MethodNotAllowed, an error answer with a body.
            func fetch(_ name: String) throws -> (status: Int, body: [UInt8]) {
                let file = directory.path(name)
                let (_, output) = try OperationsHTTP.run("/usr/bin/env", [
                    "curl", "-s", "--max-time", "10", "--http2", "--cacert", bed.certificatePath, "-o", file, "-w", "%{http_code}",
                    "https://127.0.0.1:\(port)/3/device/\(TestBed.deviceToken(index: 1, prefix: "ab"))",
                ])
                return (Int(output) ?? 0, Array(FileManager.default.contents(atPath: file) ?? Data()))
            }
            func reason(_ body: [UInt8]) -> String? {
                ((try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any])?["reason"] as? String
            }

            let plain = try fetch("plain")
            #expect(plain.status == 405 && reason(plain.body) == "MethodNotAllowed", "\(plain)")

            _ = try await bed.control("garbage-body/text")
            let text = try fetch("text")
            #expect(text.status == 405 && reason(text.body) == nil && text.body.starts(with: Array("<html>".utf8)), "\(text)")

            _ = try await bed.control("garbage-body/binary")
            let binary = try fetch("binary")
            #expect(binary.status == 405 && binary.body.count == 256 && binary.body.starts(with: [0xFF, 0xFE, 0x00]))
            #expect(String(validating: binary.body, as: UTF8.self) == nil, "not UTF-8")

            _ = try await bed.control("garbage-body/oversized")
            let oversized = try fetch("oversized")
            #expect(oversized.status == 405 && oversized.body.count == 1 << 20, "\(oversized.body.count) bytes")
            #expect(reason(oversized.body) == "MethodNotAllowed", "a well-formed document, only too big")

            _ = try await bed.control("garbage-body/unknown-reason")
            let unknown = try fetch("unknown")
            #expect(unknown.status == 405 && reason(unknown.body) == InjectedGarbageBody.unknownReason)

            _ = try await bed.control("garbage-body/long-reason")
            let long = try fetch("long")
            #expect(long.status == 405 && reason(long.body).map { $0.count == 10 * 1024 && $0.allSatisfy { $0 == "R" } } == true)

            // Herald's client on the same faults: the status alone decides, whatever the body says.
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1)
            _ = try await bed.control("garbage-body/binary")
            #expect(try await bed.sendRaw(0, on: 0, jwt: jwt, apnsID: "not-a-uuid") == .permanent(status: 400, reason: nil))
            _ = try await bed.control("garbage-body/oversized")
            #expect(try await bed.sendRaw(1, on: 0, jwt: jwt, apnsID: "not-a-uuid") == .permanent(status: 400, reason: nil))
            _ = try await bed.control("garbage-body/unknown-reason")
            #expect(try await bed.sendRaw(2, on: 0, jwt: jwt, apnsID: "not-a-uuid")
                    == .permanent(status: 400, reason: APNsReason(rawValue: InjectedGarbageBody.unknownReason)))
            _ = try await bed.control("garbage-body/off")
            #expect(try await bed.sendRaw(3, on: 0, jwt: jwt, apnsID: "not-a-uuid") == .permanent(status: 400, reason: .badMessageId))
            #expect(try await bed.sendRaw(4, on: 0, jwt: jwt) == .accepted, "a 200 never carries garbage")

            let statistics = try await bed.statistics()
            #expect(statistics.garbageBodies == 8 && statistics.rejected["BadMessageId"] == 4, "\(statistics.json())")
        }

        /// Every 403 reason, and 429, 500 and 503, injected with `--error STATUS:REASON:1`, reaches
        /// Herald's client with its status and reason.
        @Test(arguments: [
            (403, "InvalidProviderToken"), (403, "ExpiredProviderToken"), (403, "BadCertificate"), (403, "BadCertificateEnvironment"),
            (403, "MissingProviderToken"), (403, "Forbidden"), (429, "TooManyRequests"), (500, "InternalServerError"),
            (503, "ServiceUnavailable"),
        ])
        func injectedErrorsReachTheClient(status: Int, reason: String) async throws {
            let bed = try await TestBed { $0.injectedErrors = [try #require(InjectedError(argument: "\(status):\(reason):1"))] }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1)
            let expected: DeliveryOutcome = switch (status, reason) {
            case (403, "ExpiredProviderToken"): .refreshProviderToken
            case (403, _): .credentialsRejected(status: 403, reason: APNsReason(rawValue: reason))
            case (429, _): .retryTokenLater(reason: .tooManyRequests)
            default: .retryOnAnotherConnection(.status(status, APNsReason(rawValue: reason)))
            }
            for index in 0..<3 {
                #expect(try await bed.sendRaw(index, on: 0, jwt: jwt) == expected)
            }
            let statistics = try await bed.statistics()
            #expect(statistics.rejected == [reason: 3] && statistics.accepted == 0, "\(statistics.json())")
        }

        /// The emulator checks provider-token signatures: a token whose signature was altered, or
        /// signed by another key, is refused with 403 InvalidProviderToken.
        @Test
        func tokensWithAWrongSignatureAreRefused() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            // Flip one character of the signature (the last segment) to another base64url character.
            var bytes = Array(jwt.utf8)
            let position = bytes.count - 10
            bytes[position] = bytes[position] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            let altered = String(decoding: bytes, as: UTF8.self)
            let otherKey = try ES256PrivateKey.generate()
            let foreign = try ProviderTokenSigner(teamID: TestBed.teamID, keyID: TestBed.keyID, key: otherKey)
                .makeToken(issuedAt: TimeSource.system.nowMilliseconds() / 1000)
            try await bed.openRawConnections(3)
            let refused = DeliveryOutcome.credentialsRejected(status: 403, reason: .invalidProviderToken)
            #expect(try await bed.sendRaw(0, on: 0, jwt: altered) == refused)
            #expect(try await bed.sendRaw(1, on: 1, jwt: foreign) == refused)
            #expect(try await bed.sendRaw(2, on: 2, jwt: jwt) == .accepted)
            let statistics = try await bed.statistics()
            #expect(statistics.rejected == ["InvalidProviderToken": 2] && statistics.tokensRejected == 0, "\(statistics.json())")
        }

        /// `reject-tokens` refuses even a valid token, and switched off over the emulator's own
        /// HTTP/2 port (curl), the very same connection and token are accepted again.
        @Test
        func rejectTokensSwitchRefusesEveryTokenUntilSwitchedOff() async throws {
            try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 reaches the control path on the emulator's port")
            let bed = try await TestBed { $0.faults.rejectTokens = true }
            defer { bed.shutdown() }
            let jwt = try bed.validJWT()
            try await bed.openRawConnections(1)
            let refused = DeliveryOutcome.credentialsRejected(status: 403, reason: .invalidProviderToken)
            #expect(try await bed.sendRaw(0, on: 0, jwt: jwt) == refused)
            #expect(try await bed.sendRaw(1, on: 0, jwt: jwt) == refused)

            let port = try await bed.onLoop { $0.server.port }
            let (status, body) = try OperationsHTTP.curl([
                "--http2", "--cacert", bed.certificatePath, "-X", "POST", "https://127.0.0.1:\(port)/_herald/reject-tokens/off",
            ])
            #expect(status == 200 && body.contains("\"reject_tokens\":false"), "\(status) \(body)")
            #expect(try await bed.sendRaw(2, on: 0, jwt: jwt) == .accepted)

            let (onStatus, _) = try OperationsHTTP.curl([
                "--http2", "--cacert", bed.certificatePath, "https://127.0.0.1:\(port)/_herald/reject-tokens/on",
            ])
            #expect(onStatus == 200)
            #expect(try await bed.sendRaw(3, on: 0, jwt: jwt) == refused)
            let statistics = try await bed.statistics()
            #expect(statistics.tokensRejected == 3 && statistics.rejected == ["InvalidProviderToken": 3] && statistics.accepted == 1,
                    "\(statistics.json())")
        }

        /// `herald mock-apns` takes every fault as a flag, shows them at GET /_herald/faults on
        /// --stats-port, switches them there, and refuses malformed ones.
        @Test
        func commandLineFlagsSetTheFaults() async throws {
            let directory = try TemporaryDirectory(prefix: "herald-mock-flags")
            let emulator = try await MockAPNsProcess(directory: directory, index: 0, extra: [
                "--stats-port", "0", "--max-streams", "7", "--stall", "0.25", "--stall-next", "2",
                "--reset-streams", "REFUSED_STREAM:0.1", "--garbage-body", "long-reason:0.5", "--ignore-ping", "--reject-tokens", "--withhold-window",
            ])
            defer { emulator.process.signal(SIGKILL) }
            var statsPort = 0
            try await waitFor("the emulator prints `stats on`", timeout: .seconds(10), interval: .milliseconds(20)) {
                guard let line = emulator.process.stdout.split(separator: "\n").first(where: { $0.hasPrefix("stats on ") }),
                      let port = line.split(separator: ":").last.flatMap({ Int($0) }) else { return false }
                statsPort = port
                return true
            }
            let (status, faults) = try OperationsHTTP.curl(["http://127.0.0.1:\(statsPort)/_herald/faults"])
            #expect(status == 200)
            #expect(faults == #"{"max_streams":7,"latency_ms":0,"stall_rate":0.25,"stall_next":2,"reset":{"error_code":"REFUSED_STREAM","rate":0.1},"garbage_body":{"kind":"long-reason","rate":0.5},"ignore_ping":true,"reject_tokens":true,"withhold_window":true}"#)
            let (switched, after) = try OperationsHTTP.curl(["http://127.0.0.1:\(statsPort)/_herald/max-streams/2"])
            #expect(switched == 200 && after.hasPrefix(#"{"max_streams":2,"#), "\(after)")
            let (bad, message) = try OperationsHTTP.curl(["http://127.0.0.1:\(statsPort)/_herald/stall/2"])
            #expect(bad == 400 && message.contains("stall/RATE"), "\(message)")
            #expect(try await emulator.process.terminate() == 0)

            let refused = try HeraldProcess(arguments: ["mock-apns", "--port", "0", "--reset-streams", "NOT_A_CODE:0.5"],
                                            directory: directory, index: 1)
            #expect(try await refused.waitForExit() != 0)
            #expect(refused.stderr.contains("--reset-streams takes CODE:RATE"), "\(refused.stderr)")
        }
    }
}

extension TestBed {
    /// A provider token for the emulator's key, issued now.
    func validJWT() throws -> String {
        try ProviderTokenSigner(teamID: TestBed.teamID, keyID: TestBed.keyID, key: providerKey)
            .makeToken(issuedAt: TimeSource.system.nowMilliseconds() / 1000)
    }

    /// Opens `count` more raw connections (`configure` runs before they connect) and waits until they are ready.
    func openRawConnections(_ count: Int, maxStreams: Int = 10,
                            configure: @escaping @Sendable (APNsConnection) -> Void = { _ in }) async throws {
        let first = try await onLoop { bed in
            let first = bed.rawConnections.count
            for _ in 0..<count { configure(try bed.connectRaw(trusting: bed.certificatePath, maxStreams: maxStreams)) }
            return first
        }
        let ready = await waitUntil(timeout: .seconds(10)) { bed in (first..<first + count).allSatisfy { bed.probe.isReady($0) } }
        let description = try await onLoop { $0.describe() }
        try #require(ready, "\(description)")
    }

    /// Submits notifications `indices` (context = index) on raw connection `connection` with
    /// `jwt`; returns how many it took.
    func submitRaw(_ indices: Range<Int>, on connection: Int, jwt: String, apnsID: String? = nil) async throws -> Int {
        try await onLoop { bed in
            let raw = bed.rawConnections[connection]
            raw.setAuthorization(jwt: jwt, generation: 1)
            var taken = 0
            for index in indices {
                var notification = bed.notification(index: index)
                if let apnsID { notification.apnsID = apnsID }
                if raw.submit(PendingRequest(notification: notification, context: UInt64(index))) { taken += 1 }
            }
            return taken
        }
    }

    /// Sends notification `index` on raw connection `connection` and waits for its outcome.
    func sendRaw(_ index: Int, on connection: Int, jwt: String, apnsID: String? = nil) async throws -> DeliveryOutcome? {
        let taken = try await submitRaw(index..<index + 1, on: connection, jwt: jwt, apnsID: apnsID)
        try #require(taken == 1, "connection \(connection) had no free stream")
        _ = await waitUntil(timeout: .seconds(10)) { $0.probe.outcome(of: UInt64(index)) != nil }
        return try await onLoop { $0.probe.outcome(of: UInt64(index)) }
    }

    /// `GET /_herald/<path>` as the emulator's control path answers it.
    func control(_ path: String) async throws -> (status: Int, body: String) {
        try await onLoop { $0.server.control(path: "/_herald/" + path) }
    }

    func statistics() async throws -> MockAPNsStatistics {
        try await onLoop { $0.server.currentStatistics }
    }
}
