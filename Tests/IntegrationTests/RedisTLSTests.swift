import Foundation
import Glibc
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// `rediss://`: Herald's own OpenSSL stream to a `redis-server --port 0 --tls-port P`, with a
    /// CA, server and client certificates the test makes (`TestCertificates`). The worker
    /// delivers over TLS (with and without `--tls-auth-clients yes`) with every job counted; the
    /// queue tools work over it; and each way TLS can go wrong closes the connection with a
    /// message that says what to do.
    @Suite(.serialized)
    struct RedisTLSTests {
        /// One connection attempt on a private loop: ready, or closed with this error.
        static func attempt(_ endpoint: RedisEndpoint, timeoutMilliseconds: Int64 = 5_000) throws -> (ready: Bool, error: RedisError?, reply: RedisReply?) {
            let loop = try EventLoop()
            let connection = RedisConnection(loop: loop, endpoint: endpoint)
            connection.connectTimeoutMilliseconds = timeoutMilliseconds
            let events = IntegrationTests.RedisAuthentication.Events()
            connection.delegate = events
            var reply: RedisReply? = nil
            // Sent before the handshake: it must follow TLS and the login, on the encrypted stream.
            connection.send(["CLIENT", "INFO"]) { if case .success(let value) = $0 { reply = value } }
            connection.connect()
            let deadline = EventLoop.monotonicMilliseconds() + timeoutMilliseconds + 5_000
            while events.closed.isEmpty && (events.ready == 0 || reply == nil) && EventLoop.monotonicMilliseconds() < deadline {
                loop.schedule(afterMilliseconds: 2) { loop.stop() }
                loop.run()
            }
            connection.delegate = nil
            connection.close()
            return (events.ready > 0, events.closed.first, reply)
        }

        static func certificates() throws -> (TemporaryDirectory, TestCertificates) {
            let directory = try TemporaryDirectory(prefix: "herald-redis-tls")
            return (directory, try TestCertificates(directory: directory.path))
        }

        @Test
        func aTLSConnectionIsReadyAndCarriesCommandsByIPAndByName() throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            let server = try RedisServer(tls: .init(certificates: certificates))
            defer { server.stop() }
            let byIP = try Self.attempt(server.endpoint)
            #expect(byIP.ready && byIP.error == nil, "\(String(describing: byIP.error))")
            // CLIENT INFO reports the connection as Redis sees it; a TLS connection is on the TLS port.
            #expect(byIP.reply?.string?.contains("laddr=127.0.0.1:\(server.port)") == true, "\(String(describing: byIP.reply))")
            var byName = server.endpoint
            byName.host = "localhost"
            let named = try Self.attempt(byName)
            #expect(named.ready && named.error == nil, "\(String(describing: named.error))")
        }

        @Test
        func workerDeliversOverTLSAndEveryJobIsCounted() async throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            try await withWorkerBed(appendOnly: true, redisTLS: .init(certificates: certificates), emulator: { $0.unregisteredPrefix = "dead" }) { bed in
                let count = 3_000
                // Every 50th job has a malformed token (dead-lettered), every 40th one APNs calls unregistered.
                try await bed.enqueue(count) { index in
                    if index % 50 == 7 { return [("token", "not-hex"), ("payload", WorkerHarness.payload(index))] }
                    let prefix = index % 40 == 3 ? "dead" : "00"
                    return [("token", WorkerHarness.deviceToken(index, prefix: prefix)), ("payload", WorkerHarness.payload(index))]
                }
                let malformed = (0..<count).filter { $0 % 50 == 7 }.count
                let dead = (0..<count).filter { $0 % 40 == 3 && $0 % 50 != 7 }.count
                try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.deadLettered == malformed && ledger.feedback == dead, "\(ledger)")
                #expect(ledger.acceptedUnique == count - malformed - dead && ledger.duplicates == 0, "\(ledger)")
                // Every client of this Redis came over TLS: the server has no plain port at all.
                let clients = try await bed.client.send(["CLIENT", "LIST"])
                #expect(clients.string?.contains("laddr=127.0.0.1:\(bed.redis.port)") == true)

                // Redis restarts (killed; the append-only file keeps the data): the worker
                // reconnects over TLS, handshake and all, and delivers what comes next.
                try bed.redis.restart()
                let more = 500
                try await bed.enqueue(more) { index in
                    [("token", WorkerHarness.deviceToken(count + index)), ("payload", WorkerHarness.payload(count + index))]
                }
                let after = try await bed.waitUntilSettled(enqueued: count + more)
                #expect(after.settled && after.acceptedUnique == count + more - malformed - dead && after.duplicates == 0, "\(after)")
            }
        }

        @Test
        func herald_workerWithAClientCertificateDeliversToARedisThatRequiresOne() async throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            try await withWorkerBed(redisTLS: .init(certificates: certificates, authClients: true)) { bed in
                // The TLS settings as flags (--redis-ca-file, --redis-cert, --redis-key) ...
                let count = 1_000
                try await bed.enqueue(count)
                let process = try bed.startProcess(["--metrics-port", "0", "--drain-timeout", "5"])
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                #expect(ledger.settled && ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                process.signal(SIGTERM)
                let exit = try await process.waitForExit(timeout: .seconds(20))
                #expect(exit?.status == 0, "\(process.logTail())")

                // ... and in the config file (redis_ca_file, redis_cert, redis_key).
                let client = try #require(bed.redis.tls?.clientTLS)
                let config = bed.emulator.directory.path("herald.yaml")
                try """
                    redis: \(bed.redis.url)
                    redis_ca_file: \(client.caFile ?? "")
                    redis_cert: \(client.certificateFile ?? "")
                    redis_key: \(client.keyFile ?? "")
                    """.write(toFile: config, atomically: true, encoding: .utf8)
                try await bed.enqueue(count) { index in
                    [("token", WorkerHarness.deviceToken(count + index)), ("payload", WorkerHarness.payload(count + index))]
                }
                let configured = try WorkerProcess(arguments: ["--config", config, "--metrics-port", "0", "--drain-timeout", "5"]
                                                       + bed.emulator.workerArguments,
                                                   logPath: bed.emulator.directory.path("worker-config.log"))
                let both = try await bed.waitUntilSettled(enqueued: 2 * count)
                #expect(both.settled && both.acceptedUnique == 2 * count && both.duplicates == 0, "\(both)\n\(configured.logTail())")
                configured.signal(SIGTERM)
                let configuredExit = try await configured.waitForExit(timeout: .seconds(20))
                #expect(configuredExit?.status == 0, "\(configured.logTail())")
            }
        }

        @Test
        func herald_workerThatDoesNotTrustRedisSaysSoAndKeepsTrying() async throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            try await withWorkerBed(redisTLS: .init(certificates: certificates)) { bed in
                let process = try WorkerProcess(
                    arguments: ["--redis", bed.redis.url, "--redis-ca-file", certificates.otherCAFile, "--metrics-port", "0"]
                        + bed.emulator.workerArguments,
                    logPath: bed.emulator.directory.path("worker-untrusting.log"))
                try await waitFor("the worker logs why it cannot reach Redis", timeout: .seconds(30)) {
                    process.logTail().contains("Redis' TLS certificate is not trusted")
                }
                #expect(process.logTail().contains("--redis-ca-file"), "\(process.logTail())")
                #expect(process.isRunning, "a Redis it cannot trust is retried, not a reason to exit: \(process.logTail())")
                process.signal(SIGTERM)
                let exit = try await process.waitForExit(timeout: .seconds(20))
                #expect(exit?.status == 0, "\(process.logTail())")
            }
        }

        @Test
        func queueToolsWorkOverMutualTLS() throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            let harness = try QueueToolingHarness(tls: .init(certificates: certificates, authClients: true))
            let keys = harness.keys
            let token = WorkerHarness.deviceToken(1)
            let added = try harness.herald("enqueue", "--lane", "bulk", "--queue", "tooling", "--token", token, "--payload", #"{"aps":{"alert":"hi"}}"#,
                                           "--topic", "com.example.app")
            #expect(added.status == 0, "\(added.stderr)")
            #expect(try harness.length(keys.jobs) == 1)
            try harness.addDeadLetter(job: [("token", token), ("payload", "{}")], reason: "missing_topic", message: "no topic")
            try harness.addFeedback(token: token, reason: "Unregistered")

            let stats = try harness.herald("stats", "--queue", "tooling", "--json")
            #expect(stats.status == 0, "\(stats.stderr)")
            let queue = try #require((try stats.json()["queues"] as? [[String: Any]])?.first)
            #expect(queue["depth"] as? Int == 1 && queue["dead_letters"] as? Int == 1 && queue["feedback"] as? Int == 1, "\(queue)")

            let letters = try harness.herald("dead-letters", "list", "--queue", "tooling", "--json")
            #expect(letters.status == 0 && letters.stdout.contains("missing_topic"), "\(letters.stderr)")
            let requeued = try harness.herald("dead-letters", "requeue", "--queue", "tooling", "--reason", "missing_topic")
            #expect(requeued.status == 0, "\(requeued.stderr)")
            #expect(try harness.length(keys.jobs) == 2 && harness.length(keys.dead) == 0)

            let feedback = try harness.herald("feedback", "tail", "--queue", "tooling", "--json")
            #expect(feedback.status == 0 && feedback.stdout.contains("Unregistered"), "\(feedback.stderr)")

            // The same tools with a plain URL to the TLS port: Redis closes, and the message says why.
            let plain = try harness.herald(["stats", "--queue", "tooling"],
                                           environment: ["HERALD_REDIS": "redis://127.0.0.1:\(harness.server.port)",
                                                         "HERALD_REDIS_CA_FILE": "", "HERALD_REDIS_CERT": "", "HERALD_REDIS_KEY": ""])
            #expect(plain.status != 0)
            #expect(plain.stderr.contains("use a rediss:// URL"), "\(plain.stderr)")
            // TLS files with a plain URL are refused, not silently unused.
            let mixed = try harness.herald(["stats", "--queue", "tooling", "--redis", "redis://127.0.0.1:\(harness.server.port)"])
            #expect(mixed.status != 0 && mixed.stderr.contains("need a TLS URL: use rediss://"), "\(mixed.stderr)")
            // Without the client certificate: the tool names what Redis wants.
            let anonymous = try harness.herald(["stats", "--queue", "tooling"],
                                               environment: ["HERALD_REDIS_CERT": "", "HERALD_REDIS_KEY": ""])
            #expect(anonymous.status != 0 && anonymous.stderr.contains("--redis-cert"), "\(anonymous.stderr)")
            // A missing CA file is a start-up error that names the file.
            let missing = try harness.herald(["stats", "--queue", "tooling", "--redis-ca-file", "/nonexistent/ca.pem"])
            #expect(missing.status != 0 && missing.stderr.contains("/nonexistent/ca.pem"), "\(missing.stderr)")
        }

        @Test
        func rediss_toAPlainPortSaysTheServerDidNotAnswerTLS() throws {
            let server = try RedisServer()
            defer { server.stop() }
            var endpoint = server.endpoint
            endpoint.tls = RedisTLS()
            let result = try Self.attempt(endpoint, timeoutMilliseconds: 2_000)
            #expect(!result.ready)
            #expect(result.error?.description.contains("the server did not answer TLS; is this a TLS port? use redis:// for plain") == true,
                    "\(String(describing: result.error))")
            // And the plain server is none the worse for it.
            #expect(RedisServer.ping(port: server.port))
        }

        @Test
        func plainRedisToATLSPortSaysUseRediss() throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            let server = try RedisServer(tls: .init(certificates: certificates))
            defer { server.stop() }
            var endpoint = server.endpoint
            endpoint.tls = nil
            let result = try Self.attempt(endpoint)
            #expect(!result.ready)
            #expect(result.error?.description.contains("if the server speaks TLS on this port (tls-port), use a rediss:// URL") == true,
                    "\(String(describing: result.error))")
        }

        @Test
        func anUntrustedCertificateSaysWhichCAToGive() throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            let server = try RedisServer(tls: .init(certificates: certificates))
            defer { server.stop() }
            var endpoint = server.endpoint
            endpoint.tls = RedisTLS(caFile: certificates.otherCAFile)
            let other = try Self.attempt(endpoint)
            #expect(!other.ready)
            let text = other.error?.description ?? ""
            #expect(text.contains("Redis' TLS certificate is not trusted") && text.contains("--redis-ca-file")
                    && text.contains(certificates.otherCAFile), "\(text)")
            // Without a CA file the system store decides, and it does not know the test CA either.
            endpoint.tls = RedisTLS()
            let system = try Self.attempt(endpoint)
            #expect(!system.ready)
            #expect(system.error?.description.contains("does not chain to the system CA store") == true, "\(String(describing: system.error))")
        }

        @Test
        func aCertificateForAnotherNameIsRefusedWithTheName() throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            var tls = RedisServer.TLS(certificates: certificates)
            tls.serverCertificate = certificates.wrongNameCertificate
            tls.serverKey = certificates.wrongNameKey
            let server = try RedisServer(tls: tls)
            defer { server.stop() }
            let byIP = try Self.attempt(server.endpoint)
            #expect(!byIP.ready)
            #expect(byIP.error?.description.contains("Redis' TLS certificate is not valid for 127.0.0.1") == true,
                    "\(String(describing: byIP.error))")
            var byName = server.endpoint
            byName.host = "localhost"
            let named = try Self.attempt(byName)
            #expect(!named.ready)
            #expect(named.error?.description.contains("not valid for localhost") == true, "\(String(describing: named.error))")
        }

        @Test
        func aMissingOrStrangeClientCertificateSaysSo() throws {
            let (directory, certificates) = try Self.certificates()
            _ = directory
            let server = try RedisServer(tls: .init(certificates: certificates, authClients: true))
            defer { server.stop() }
            var endpoint = server.endpoint
            endpoint.tls = RedisTLS(caFile: certificates.caFile)
            let anonymous = try Self.attempt(endpoint)
            #expect(!anonymous.ready)
            #expect(anonymous.error?.description.contains("requires a client certificate") == true,
                    "\(String(describing: anonymous.error))")
            endpoint.tls = RedisTLS(caFile: certificates.caFile, certificateFile: certificates.strangerCertificate, keyFile: certificates.strangerKey)
            let stranger = try Self.attempt(endpoint)
            #expect(!stranger.ready)
            #expect(stranger.error?.description.contains("rejected Herald's client certificate") == true,
                    "\(String(describing: stranger.error))")
            // The right one is let in.
            let accepted = try Self.attempt(server.endpoint)
            #expect(accepted.ready && accepted.error == nil, "\(String(describing: accepted.error))")
        }

        @Test
        func urlsAndSettings() throws {
            let endpoint = try RedisEndpoint(url: "rediss://app:pw@cache.internal:6380/2")
            #expect(endpoint.tls == RedisTLS())
            #expect(endpoint.description == "rediss://app:***@cache.internal:6380/2")
            #expect(try RedisEndpoint(url: "redis://cache.internal").tls == nil)
            #expect(throws: TLSError.self) { try RedisTLS(caFile: nil, certificateFile: "/tmp/x.pem", keyFile: nil).makeContext() }
            #expect(throws: TLSError.self) { try RedisTLS(caFile: "/nonexistent/ca.pem").makeContext() }
        }
    }
}
