import APNs
import Foundation
import MockAPNs
import Testing
import Transport

extension IntegrationTests {
    /// The emulator's first rules, as an HTTP/2 client other than Herald's sees them (curl, over
    /// TLS): which paths are device pushes, what a device token in the path may be, and which
    /// `apns-id` comes back. The emulator reads the path and the apns-id as bytes; these are the
    /// answers APNs documents, byte for byte.
    @Suite
    struct EmulatorRequestRules {
        struct Answer: CustomStringConvertible {
            let status: Int
            let reason: String?
            let apnsID: String?
            var description: String { "\(status) \(reason ?? "-") apns-id \(apnsID ?? "none")" }
        }

        /// POST `path` with a valid provider token and topic (and `apnsID` when given).
        static func post(_ path: String, apnsID: String? = nil, bed: TestBed, port: Int, jwt: String,
                         directory: TemporaryDirectory) throws -> Answer {
            let headers = directory.path("headers"), body = directory.path("body")
            var arguments = [
                "curl", "-s", "--max-time", "10", "--http2", "--path-as-is", "--cacert", bed.certificatePath,
                "-D", headers, "-o", body, "-w", "%{http_code}",
                "-H", "authorization: bearer \(jwt)", "-H", "apns-topic: \(TestBed.topic)",
                "--data-binary", #"{"aps":{"alert":"rules"}}"#,
            ]
            if let apnsID { arguments += ["-H", "apns-id: \(apnsID)"] }
            let (_, output) = try OperationsHTTP.run("/usr/bin/env", arguments + ["https://127.0.0.1:\(port)\(path)"])
            let headerText = (try? String(contentsOfFile: headers, encoding: .utf8)) ?? ""
            let echoed = headerText.split(separator: "\r\n").first { $0.lowercased().hasPrefix("apns-id:") }
                .map { $0.dropFirst("apns-id:".count).trimmingCharacters(in: .whitespaces) }
            let json = FileManager.default.contents(atPath: body).flatMap { try? JSONSerialization.jsonObject(with: $0) }
            return Answer(status: Int(output) ?? 0, reason: (json as? [String: Any])?["reason"] as? String, apnsID: echoed)
        }

        @Test
        func pathsTokensAndApnsIDsAreAnsweredAsAPNsDoes() async throws {
            try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 is needed")
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let port = try await bed.onLoop { $0.server.port }
            let jwt = try bed.validJWT()
            let directory = try TemporaryDirectory(prefix: "herald-rules")
            func post(_ path: String, apnsID: String? = nil) throws -> Answer {
                try Self.post(path, apnsID: apnsID, bed: bed, port: port, jwt: jwt, directory: directory)
            }
            let token = TestBed.deviceToken(index: 7, prefix: "ab")
            let id = "123e4567-e89b-12d3-a456-426614174000"

            // A canonical apns-id comes back as sent; without one, the emulator makes a canonical one.
            let given = try post("/3/device/\(token)", apnsID: id)
            #expect(given.status == 200 && given.apnsID == id, "\(given)")
            let made = try post("/3/device/\(token)")
            #expect(made.status == 200 && made.apnsID.map(UUIDString.isCanonical) == true && made.apnsID != id, "\(made)")
            // Hex digits in either case are the same device.
            #expect(try post("/3/device/\(token.uppercased())", apnsID: id).status == 200)
            // Another spelling of an id is refused, and echoed as it came.
            let upper = try post("/3/device/\(token)", apnsID: id.uppercased())
            #expect(upper.status == 400 && upper.reason == "BadMessageId" && upper.apnsID == id.uppercased(), "\(upper)")
            let short = try post("/3/device/\(token)", apnsID: "not-a-uuid")
            #expect(short.status == 400 && short.reason == "BadMessageId" && short.apnsID == "not-a-uuid", "\(short)")

            // Paths: only `/3/device/<token>`, matched byte for byte.
            for path in ["/3/devices/\(token)", "/3/DEVICE/\(token)", "/3/device", "/", "/4/device/\(token)"] {
                let answer = try post(path, apnsID: id)
                #expect(answer.status == 404 && answer.reason == "BadPath" && answer.apnsID == id, "\(path): \(answer)")
            }
            let missing = try post("/3/device/", apnsID: id)
            #expect(missing.status == 400 && missing.reason == "MissingDeviceToken", "\(missing)")
            // Tokens the rules refuse: odd length, a non-hex digit, too short, too long, not ASCII.
            for bad in [String(token.dropLast()), String(token.dropLast()) + "z", "abcd", String(repeating: "ab", count: 101),
                        String(token.dropLast(2)) + "é", token + "/extra"] {
                let answer = try post("/3/device/\(bad)", apnsID: id)
                #expect(answer.status == 400 && answer.reason == "BadDeviceToken", "\(bad.prefix(12))…: \(answer)")
            }

            let statistics = try await bed.statistics()
            #expect(statistics.accepted == 3, "\(statistics.json())")
            #expect(statistics.rejected["BadPath"] == 5 && statistics.rejected["BadDeviceToken"] == 6
                    && statistics.rejected["BadMessageId"] == 2 && statistics.rejected["MissingDeviceToken"] == 1, "\(statistics.json())")
        }
    }
}
