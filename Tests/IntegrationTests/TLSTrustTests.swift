import APNs
import Foundation
import HeraldTestSupport
import MockAPNs
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Herald verifies the server it talks to: chain, name and ALPN. A refused server costs no
    /// notification: nothing is taken from the caller before a connection is ready.
    @Suite
    struct TLSTrust {
        /// Whether `error` is a TLS certificate verification failure.
        static func isVerificationFailure(_ error: ConnectionError??) -> Bool {
            if case .some(.some(.tls(.verificationFailed))) = error { return true }
            return false
        }

        @Test
        func untrustedCertificateIsRefused() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            // A raw connection trusting only the system store: the emulator's self-signed
            // certificate is not in it.
            let taken = try await bed.onLoop { bed in
                let connection = try bed.connectRaw(trusting: nil)
                return connection.submit(PendingRequest(notification: bed.notification(index: 0), context: 0))
            }
            #expect(!taken, "a connection that is not ready takes no request")
            let closed = await bed.waitUntil(timeout: .seconds(10)) { $0.probe.closeError(of: 0) != nil }
            let (error, events) = try await bed.onLoop { ($0.probe.closeError(of: 0), "\($0.probe.events)") }
            try #require(closed, "the connection neither failed nor closed: \(events)")
            #expect(Self.isVerificationFailure(error), "closed with \(String(describing: error))")
            #expect(!events.contains("ready"), "\(events)")

            // The same through a pool: it never offers a slot, so the caller keeps every notification.
            try await bed.onLoop { bed in
                try bed.startPool(connections: 2, maxStreams: 10, trusted: false)
                bed.enqueue(5)
            }
            let failedTwice = await bed.waitUntil(timeout: .seconds(10)) { $0.pool.connectionFailures >= 2 }
            let state = try await bed.onLoop { $0.snapshot() }
            let freeSlots = try await bed.onLoop { $0.pool.freeSlots }
            try #require(failedTwice, "\(state)")
            #expect(freeSlots == 0)
            #expect(state.handOvers == 0 && state.heldByCaller == 5 && state.finals == 0, "\(state)")
            #expect(state.poolInFlight == 0, "\(state)")
            #expect(state.emulator.streams == 0 && state.emulator.accepted == 0, "\(state)")
        }

        /// The certificate is trusted but does not name the address Herald dialled.
        @Test(arguments: [
            "a certificate for localhost and 127.0.0.1, served on 127.0.0.2",
            "a certificate for other.example only, served on 127.0.0.1",
        ])
        func wrongHostNameIsRefused(_ setup: String) async throws {
            let files = try TemporaryDirectory(prefix: "herald-it-cert")
            let onOtherAddress = setup.hasSuffix("127.0.0.2")
            let host = onOtherAddress ? "127.0.0.2" : "127.0.0.1"
            let certificate = onOtherAddress
                ? try SelfSignedCertificate.generate()
                : try SelfSignedCertificate.generate(commonName: "other.example", dnsNames: ["other.example"], ipAddresses: [])
            let certificateFile = files.path("cert.pem")
            let keyFile = files.path("key.pem")
            try certificate.write(certificateTo: certificateFile, keyTo: keyFile)
            let bed = try await TestBed {
                $0.host = host
                $0.certificateFile = certificateFile
                $0.keyFile = keyFile
            }
            defer { bed.shutdown() }
            try await bed.onLoop { bed in _ = try bed.connectRaw(host: host, trusting: certificateFile) }
            let closed = await bed.waitUntil(timeout: .seconds(10)) { $0.probe.closeError(of: 0) != nil }
            let (error, events) = try await bed.onLoop { ($0.probe.closeError(of: 0), "\($0.probe.events)") }
            try #require(closed, "the connection neither failed nor closed: \(events)")
            #expect(Self.isVerificationFailure(error), "closed with \(String(describing: error))")
            let statistics = try await bed.onLoop { $0.server.currentStatistics }
            #expect(statistics.streams == 0)
        }

        /// A TLS server that does not speak ALPN h2 (`openssl s_server`, which selects no protocol).
        @Test
        func alpnMissingIsRefused() async throws {
            guard let openssl = Self.which("openssl") else {
                // CI installs openssl; this only keeps a bare developer machine from failing.
                print("skipping alpnMissingIsRefused: openssl is not installed")
                return
            }
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let server = TestProcess()
            server.executableURL = URL(fileURLWithPath: openssl)
            let files = try TemporaryDirectory(prefix: "herald-it-alpn")
            let certificate = try SelfSignedCertificate.generate()
            try certificate.write(certificateTo: files.path("cert.pem"), keyTo: files.path("key.pem"))
            server.arguments = [
                "s_server", "-accept", "127.0.0.1:0", "-cert", files.path("cert.pem"), "-key", files.path("key.pem"),
                "-naccept", "1",
            ]
            let output = Pipe()
            let input = Pipe()
            server.standardOutput = output
            server.standardError = FileHandle.nullDevice
            server.standardInput = input
            try server.run()
            defer {
                if server.isRunning { server.terminate() }
                server.waitUntilExit()
            }
            // s_server prints "ACCEPT 127.0.0.1:<port>" once it listens.
            var printed = ""
            while !printed.contains("\n") || !printed.contains("ACCEPT") {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                printed += String(decoding: chunk, as: UTF8.self)
            }
            let port = printed.split(separator: "\n").first { $0.hasPrefix("ACCEPT") }
                .flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
            let listening = try #require(port, "openssl s_server did not start: \(printed)")

            try await bed.onLoop { bed in
                _ = try bed.connectRaw(port: listening, trusting: files.path("cert.pem"))
            }
            let closed = await bed.waitUntil(timeout: .seconds(10)) { $0.probe.closeError(of: 0) != nil }
            let (error, events) = try await bed.onLoop { ($0.probe.closeError(of: 0), "\($0.probe.events)") }
            try #require(closed, "the connection neither failed nor closed: \(events)")
            guard case .some(.some(.tls(.alpnNotNegotiated(let host, let selected)))) = error else {
                Issue.record("expected alpnNotNegotiated, closed with \(String(describing: error))")
                return
            }
            #expect(host == "127.0.0.1")
            #expect(selected == nil)
        }

        static func which(_ name: String) -> String? {
            let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
            for directory in path.split(separator: ":") {
                let candidate = "\(directory)/\(name)"
                if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            }
            return nil
        }
    }
}
