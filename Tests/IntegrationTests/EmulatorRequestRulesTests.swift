import APNs
import Foundation
@testable import MockAPNs
import Testing
@testable import Transport

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
            var uniqueID: String? = nil
            var description: String { "\(status) \(reason ?? "-") apns-id \(apnsID.map { String($0.prefix(40)) } ?? "none") (\(apnsID?.count ?? 0) characters) unique id \(uniqueID ?? "none")" }
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
            func header(_ name: String) -> String? {
                headerText.split(separator: "\r\n").first { $0.lowercased().hasPrefix(name + ":") }
                    .map { $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces) }
            }
            let json = FileManager.default.contents(atPath: body).flatMap { try? JSONSerialization.jsonObject(with: $0) }
            return Answer(status: Int(output) ?? 0, reason: (json as? [String: Any])?["reason"] as? String, apnsID: header("apns-id"),
                          uniqueID: header("apns-unique-id"))
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
            // Tokens the rules refuse: odd length, a non-hex digit, too short, too long, a percent
            // escape (curl sends a non-ASCII path that way), another path segment.
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

        /// An apns-id longer than any id, answered with the sandbox's apns-unique-id on: the id
        /// comes back whole (APNs echoes what it was sent), with the unique id and a whole JSON
        /// body. The answer's values once went into a fixed 256-byte scratch, which cut a long id
        /// short and then left the unique id out and the body's headers empty.
        @Test
        func anOversizedApnsIDIsEchoedWholeBesideTheUniqueIDAndTheBody() async throws {
            try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 is needed")
            let bed = try await TestBed(emulator: { $0.uniqueIDs = true })
            defer { bed.shutdown() }
            let port = try await bed.onLoop { $0.server.port }
            let jwt = try bed.validJWT()
            let directory = try TemporaryDirectory(prefix: "herald-rules")
            let token = TestBed.deviceToken(index: 7, prefix: "ab")
            for length in [37, 200, 300, 4_000] {
                let id = String(repeating: "7", count: length)
                let answer = try Self.post("/3/device/\(token)", apnsID: id, bed: bed, port: port, jwt: jwt, directory: directory)
                #expect(answer.status == 400 && answer.reason == "BadMessageId" && answer.apnsID == id, "\(length): \(answer)")
                #expect(answer.uniqueID.map(UUIDString.isCanonical) == true, "\(length): \(answer)")
            }
            // A usual answer after them (its values in the connection's own scratch) is whole too.
            let id = "123e4567-e89b-12d3-a456-426614174000"
            let accepted = try Self.post("/3/device/\(token)", apnsID: id, bed: bed, port: port, jwt: jwt, directory: directory)
            #expect(accepted.status == 200 && accepted.apnsID == id && accepted.uniqueID.map(UUIDString.isCanonical) == true, "\(accepted)")
            let statistics = try await bed.statistics()
            #expect(statistics.accepted == 1 && statistics.rejected["BadMessageId"] == 4, "\(statistics.json())")
        }

        /// Paths no HTTP client here sends as they are (curl percent-escapes them): a combining
        /// mark right after a route's prefix, and bytes that are not UTF-8. Routes are matched on
        /// the path's bytes and the rest is taken from the bytes after the prefix, so the mark
        /// stays in what follows: it neither joins the prefix's `/` (no route) nor vanishes.
        @Test
        func pathsAreRoutedAndCutByTheirBytes() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let token = Array(TestBed.deviceToken(index: 9, prefix: "ab").utf8)
            let mark: [UInt8] = [0xCC, 0x81]  // U+0301 COMBINING ACUTE ACCENT
            @Sendable func request(_ path: [UInt8], pushType: String = "alert", channel: String? = nil) -> HTTP2ServerRequest {
                var request = HTTP2ServerRequest(streamID: 1)
                request.method = "POST"
                request.pathBytes = path
                var fields = [("apns-topic", TestBed.topic), ("apns-push-type", pushType)]
                if let channel { fields.append(("apns-channel-id", channel)) }
                for (name, value) in fields {
                    Array(name.utf8).withUnsafeBufferPointer { name in
                        Array(value.utf8).withUnsafeBufferPointer { request.appendField(name: name, value: $0) }
                    }
                }
                request.body = Array(#"{"aps":{"alert":"bytes"}}"#.utf8)
                return request
            }
            let answers = try await bed.onLoop { bed -> [(Int, String?)] in
                let state = MockAPNsServer.ConnectionState()
                let paths: [[UInt8]] = [
                    Array("/3/device/".utf8) + token,                                    // the control case: accepted
                    Array("/3/device/".utf8) + mark + token.dropLast(2),                 // a mark first: not hex
                    Array("/3/device/".utf8) + [0xFF, 0xFE] + token.dropLast(2),         // not UTF-8
                    Array("/3/device/".utf8) + token.dropLast(2) + [0xC3],               // cut in a character
                ]
                var answers = paths.map { path -> (Int, String?) in
                    let answer = bed.server.evaluate(request(path), state: state, certificateAuthenticated: true)
                    return (answer.status, answer.reason)
                }
                let channel = try bed.server.channels.create(bundleID: TestBed.topic, storagePolicy: .mostRecent)
                for bundle in [Array(TestBed.topic.utf8), mark + Array(TestBed.topic.utf8)] {
                    let path = Array("/4/broadcasts/apps/".utf8) + bundle
                    let broadcast = bed.server.evaluateBroadcast(request(path, pushType: "liveactivity", channel: channel.id),
                                                                 state: state, certificateAuthenticated: true)
                    answers.append((broadcast.status, broadcast.reason))
                }
                let control = bed.server.control(path: String(decoding: Array("/_herald/".utf8) + mark + Array("stats".utf8), as: UTF8.self))
                answers.append((control.status, nil))
                return answers
            }
            #expect(answers[0].0 == 200, "\(answers[0])")
            for index in 1...3 {
                #expect(answers[index].0 == 400 && answers[index].1 == "BadDeviceToken", "path \(index): \(answers[index])")
            }
            // A broadcast on the app's channel is judged past the channel (its payload is not a Live
            // Activity's); with the mark the bundle id keeps it, and the app has no such channel.
            #expect(answers[4].1 != "ChannelNotRegistered", "\(answers[4])")
            #expect(answers[5].1 == "ChannelNotRegistered", "\(answers[5])")
            // No control path is named with a mark in front.
            #expect(answers[6].0 == 404, "\(answers[6])")
        }
    }
}
