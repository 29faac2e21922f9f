import Foundation
import Glibc
import MockAPNs
import Testing
import Transport

extension IntegrationTests {
    /// Broadcast push and channel management, end to end through real processes: `herald
    /// channels` against `herald mock-apns`'s channel management listener (TLS + HTTP/2, the
    /// emulator's provider key), and broadcasts sent to the emulator's push port with curl, a
    /// second HTTP/2 client. Every broadcast sent is counted: accepted ones per channel in the
    /// emulator's stats, refused ones by reason.
    @Suite(.serialized)
    struct Channels {
        static let bundle = "com.example.app"

        /// create → list shows it → show → broadcast to it (exactly once, counted per channel) →
        /// delete → list no longer shows it → a broadcast to it is ChannelNotRegistered and
        /// `show` says so with exit status 1.
        @Test
        func channelLifecycleThroughTheCLIAndBroadcasts() async throws {
            try await withOperationsBed { bed in
                try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 sends the broadcasts")
                let emulator = try await bed.startEmulator()
                let api = try ChannelsAPI(emulator: emulator, directory: bed.directory)

                let created = try await CLIRun(bed, ["channels", "create", "--json"] + api.cliArguments)
                #expect(created.status == 0, "\(created)")
                let id = try #require(ChannelsAPI.member("channel_id", in: created.stdout), "\(created)")
                #expect(ChannelStore.isWellFormedID(id), "\(id)")
                #expect(!created.stdout.contains(api.jwt) && !created.stderr.contains("bearer"), "the token is never printed")

                let listed = try await CLIRun(bed, ["channels", "list"] + api.cliArguments)
                #expect(listed.status == 0 && listed.stdout.contains(id), "\(listed)")
                let shown = try await CLIRun(bed, ["channels", "show", id] + api.cliArguments)
                #expect(shown.status == 0 && shown.stdout.contains("none") && shown.stdout.contains("LiveActivity"), "\(shown)")

                // Two broadcasts with their own apns-ids: each accepted once, with apns-unique-id.
                var sent = 0
                for _ in 0..<2 {
                    let answer = try api.broadcast(channelID: id)
                    sent += 1
                    #expect(answer.status == 200, "\(answer)")
                    #expect(answer.header("apns-unique-id")?.count == 36, "\(answer)")
                }
                // A no-storage channel takes expiration 0 only.
                let expiring = try api.broadcast(channelID: id, extraHeaders: ["apns-expiration: 1900000000"])
                sent += 1
                #expect(expiring.status == 400 && expiring.body.contains("BadExpirationDate"), "\(expiring)")
                var counts = try api.statistics()
                #expect(counts["broadcasts_accepted"] as? Int == 2, "\(counts)")
                #expect(counts["broadcast_duplicates"] as? Int == 0, "\(counts)")
                #expect((counts["broadcasts_by_channel"] as? [String: Int])?["\(Channels.bundle)/\(id)"] == 2, "\(counts)")

                // A most-recent channel keeps the broadcast: a later expiration is fine there.
                let stored = try await CLIRun(bed, ["channels", "create", "--storage", "most-recent"] + api.cliArguments)
                #expect(stored.status == 0 && stored.stdout.contains("most-recent"), "\(stored)")
                let storedID = try #require(stored.stdout.split(separator: "\n").dropFirst().first?.split(separator: " ").first.map(String.init))
                let kept = try api.broadcast(channelID: storedID, extraHeaders: ["apns-expiration: 1900000000"])
                sent += 1
                #expect(kept.status == 200, "\(kept)")

                let deleted = try await CLIRun(bed, ["channels", "delete", id] + api.cliArguments)
                #expect(deleted.status == 0, "\(deleted)")
                let after = try await CLIRun(bed, ["channels", "list", "--json"] + api.cliArguments)
                #expect(after.status == 0 && !after.stdout.contains(id) && after.stdout.contains(storedID), "\(after)")
                let gone = try api.broadcast(channelID: id)
                sent += 1
                #expect(gone.status == 400 && gone.body.contains("ChannelNotRegistered"), "\(gone)")
                let showGone = try await CLIRun(bed, ["channels", "show", id] + api.cliArguments)
                #expect(showGone.status == 1 && showGone.stderr.contains("ChannelNotRegistered") && showGone.stderr.contains("herald channels list"),
                        "\(showGone)")

                // Nothing lost: every broadcast sent was accepted or refused with its reason.
                counts = try api.statistics()
                let rejected = counts["rejected"] as? [String: Int] ?? [:]
                let accepted = counts["broadcasts_accepted"] as? Int ?? -1
                #expect(accepted == 3, "\(counts)")
                #expect(accepted + (rejected["BadExpirationDate"] ?? 0) + (rejected["ChannelNotRegistered"] ?? 0) - 1 == sent,
                        "the deleted channel's `show` is the one extra ChannelNotRegistered: \(counts)")
                #expect(counts["channels"] as? Int == 1 && counts["channels_created"] as? Int == 2 && counts["channels_deleted"] as? Int == 1,
                        "\(counts)")
            }
        }

        /// Hostile requests get Apple's reasons and the emulator keeps serving: bad create bodies,
        /// malformed and huge channel ids, a missing id, the wrong push type, an oversized payload,
        /// a bundle id with a push-type suffix, a Live Activity payload without its members.
        @Test
        func hostileRequestsGetAppleReasonsAndNeverCrashTheEmulator() async throws {
            try await withOperationsBed { bed in
                try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 sends the raw requests")
                let emulator = try await bed.startEmulator()
                let api = try ChannelsAPI(emulator: emulator, directory: bed.directory)

                for (body, reason) in [("not json", "BadPayload"), ("[1,2]", "BadPayload"), ("", "BadPayload"),
                                       ("{\"message-storage-policy\":7,\"push-type\":\"LiveActivity\"}", "BadMessageStoragePolicy"),
                                       ("{\"message-storage-policy\":\"0\",\"push-type\":\"LiveActivity\"}", "BadMessageStoragePolicy"),
                                       ("{\"message-storage-policy\":0,\"push-type\":\"Alert\"}", "InvalidPushType"),
                                       ("{\"message-storage-policy\":0}", "InvalidPushType")] {
                    let answer = try api.manage("POST", "channels", body: body)
                    #expect(answer.status == 400 && answer.body.contains(reason), "\(body): \(answer)")
                }
                let huge = String(repeating: "A", count: 8000)
                for (id, reason) in [("not base64!", "BadChannelId"), (huge, "BadChannelId"), ("QUJD", "ChannelNotRegistered"), ("QQ=A", "BadChannelId")] {
                    let read = try api.manage("GET", "channels", channelID: id)
                    #expect(read.body.contains(reason), "\(id.prefix(20)): \(read)")
                    let sent = try api.broadcast(channelID: id)
                    #expect(sent.status == 400 && sent.body.contains(reason), "\(id.prefix(20)): \(sent)")
                }
                #expect(try api.manage("GET", "channels").body.contains("MissingChannelId"))
                #expect(try api.broadcast(channelID: nil).body.contains("MissingChannelId"))
                #expect(try api.manage("PUT", "channels").status == 405)
                #expect(try api.manage("GET", "nothing-here").status == 404)

                let created = try api.manage("POST", "channels", body: "{\"message-storage-policy\":0,\"push-type\":\"LiveActivity\"}")
                #expect(created.status == 201, "\(created)")
                let id = try #require(created.header("apns-channel-id"))
                let wrongType = try api.broadcast(channelID: id, pushType: "alert")
                #expect(wrongType.status == 400 && wrongType.body.contains("InvalidPushType"), "\(wrongType)")
                let big = "{\"aps\":{\"timestamp\":1,\"event\":\"update\",\"content-state\":{}},\"pad\":\"" + String(repeating: "x", count: 6000) + "\"}"
                let tooLarge = try api.broadcast(channelID: id, payload: big)
                #expect(tooLarge.status == 413 && tooLarge.body.contains("PayloadTooLarge"), "\(tooLarge)")
                // 4,097 to 5,120 bytes: too large for a device push, allowed for a broadcast.
                let large = "{\"aps\":{\"timestamp\":1,\"event\":\"update\",\"content-state\":{}},\"pad\":\"" + String(repeating: "x", count: 4800) + "\"}"
                #expect(try api.broadcast(channelID: id, payload: large).status == 200)
                let noEvent = try api.broadcast(channelID: id, payload: "{\"aps\":{\"timestamp\":1}}")
                #expect(noEvent.status == 400 && noEvent.body.contains("BadPayload"), "\(noEvent)")
                let badPriority = try api.broadcast(channelID: id, extraHeaders: ["apns-priority: 1"])
                #expect(badPriority.status == 400 && badPriority.body.contains("BadPriority"), "\(badPriority)")
                let suffixed = try api.broadcast(channelID: id, bundle: Channels.bundle + ".push-type.liveactivity")
                #expect(suffixed.status == 400 && suffixed.body.contains("TopicMismatch"), "\(suffixed)")
                let noToken = try api.broadcast(channelID: id, withToken: false)
                #expect(noToken.status == 403 && noToken.body.contains("MissingProviderToken"), "\(noToken)")

                // Still serving, and every accepted broadcast counted once.
                try emulator.process.requireRunning()
                let counts = try api.statistics()
                #expect(counts["broadcasts_accepted"] as? Int == 1, "\(counts)")
                #expect((counts["broadcasts_by_channel"] as? [String: Int])?["\(Channels.bundle)/\(id)"] == 1, "\(counts)")
            }
        }

        /// An app at its channel limit gets 400 CannotCreateChannelConfig and the CLI says to
        /// delete channels; `--broadcast-disabled` is FeatureNotEnabled for both APIs.
        @Test
        func channelLimitAndDisabledFeature() async throws {
            try await withOperationsBed { bed in
                try #require(OperationsHTTP.curlHasHTTP2, "curl with HTTP/2 sends the broadcasts")
                let emulator = try await bed.startEmulator(["--max-channels", "3"])
                let api = try ChannelsAPI(emulator: emulator, directory: bed.directory)
                for _ in 0..<3 {
                    let run = try await CLIRun(bed, ["channels", "create"] + api.cliArguments)
                    #expect(run.status == 0, "\(run)")
                }
                let full = try await CLIRun(bed, ["channels", "create"] + api.cliArguments)
                #expect(full.status == 1 && full.stderr.contains("CannotCreateChannelConfig") && full.stderr.contains("delete"), "\(full)")
                // Another app has its own budget.
                let other = try await CLIRun(bed, ["channels", "create"] + api.cliArguments(bundle: "com.example.other"))
                #expect(other.status == 0, "\(other)")

                let disabled = try await bed.startEmulator(["--broadcast-disabled"])
                let off = try ChannelsAPI(emulator: disabled, directory: bed.directory)
                let refused = try await CLIRun(bed, ["channels", "create"] + off.cliArguments)
                #expect(refused.status == 1 && refused.stderr.contains("FeatureNotEnabled"), "\(refused)")
                let broadcast = try off.broadcast(channelID: "QUJDREVGR0hJSktMTU5PUA==")
                #expect(broadcast.status == 400 && broadcast.body.contains("FeatureNotEnabled"), "\(broadcast)")

                let unreachable = try await CLIRun(bed, ["channels", "list", "--channels-host", "127.0.0.1:1", "--timeout", "5", "--bundle-id", Channels.bundle] + api.credentialArguments)
                #expect(unreachable.status == 69, "\(unreachable)")
            }
        }

        /// APNs' limit itself: 10,000 channels per app, the 10,001st refused, other apps unaffected.
        @Test
        func storeHoldsTenThousandChannelsPerApp() throws {
            var store = ChannelStore()
            var ids = Set<String>()
            for _ in 0..<ChannelStore.defaultMaxChannelsPerApp {
                ids.insert(try store.create(bundleID: Channels.bundle, storagePolicy: .noStorage).id)
            }
            #expect(ids.count == 10_000 && ids.allSatisfy(ChannelStore.isWellFormedID))
            #expect(throws: ChannelStoreError.tooManyChannels) { try store.create(bundleID: Channels.bundle, storagePolicy: .mostRecent) }
            #expect(try store.create(bundleID: "com.example.other", storagePolicy: .noStorage).storagePolicy == .noStorage)
            let deleted = store.delete(bundleID: Channels.bundle, id: ids.first!)
            #expect(deleted)
            #expect(try store.create(bundleID: Channels.bundle, storagePolicy: .mostRecent).storagePolicy == .mostRecent)
        }
    }
}

/// The emulator's two APIs reached with curl (status, headers, body) and `herald channels` flags.
struct ChannelsAPI {
    struct Answer: CustomStringConvertible {
        let status: Int
        let headers: [String: String]
        let body: String
        func header(_ name: String) -> String? { headers[name] }
        var description: String { "\(status) \(headers) \(body.prefix(300))" }
    }

    let emulator: MockAPNsProcess
    let channelsPort: Int
    let jwt: String
    let directory: TemporaryDirectory

    init(emulator: MockAPNsProcess, directory: TemporaryDirectory) throws {
        self.emulator = emulator
        self.directory = directory
        guard let line = emulator.process.stdout.split(separator: "\n").first(where: { $0.hasPrefix("channels on ") }),
              let port = line.split(separator: ":").last.flatMap({ Int($0) }) else {
            throw WaitTimeout(description: "the emulator printed no `channels on`: \(emulator.process.stdout)")
        }
        channelsPort = port
        let signer = try ProviderTokenSigner(teamID: "TEAM000001", keyID: "KEY0000001", key: try ES256PrivateKey(pemFile: emulator.keyPath))
        jwt = try signer.makeToken(issuedAt: Int64(Date().timeIntervalSince1970))
    }

    var credentialArguments: [String] {
        ["--ca-file", emulator.certificatePath, "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", emulator.keyPath]
    }

    var cliArguments: [String] { cliArguments(bundle: IntegrationTests.Channels.bundle) }

    func cliArguments(bundle: String) -> [String] {
        ["--channels-host", "127.0.0.1:\(channelsPort)", "--bundle-id", bundle] + credentialArguments
    }

    /// A request to the channel management listener.
    func manage(_ method: String, _ resource: String, channelID: String? = nil, body: String? = nil) throws -> Answer {
        var arguments = ["-X", method, "-H", "authorization: bearer \(jwt)"]
        if let channelID { arguments += ["-H", "apns-channel-id: \(channelID)"] }
        if let body { arguments += ["--data-binary", body] }
        return try curl(arguments + ["https://127.0.0.1:\(channelsPort)/1/apps/\(IntegrationTests.Channels.bundle)/\(resource)"])
    }

    /// A broadcast on the push port: a fresh apns-id, priority 10, expiration 0, a Live Activity update.
    func broadcast(channelID: String?, pushType: String = "liveactivity", bundle: String = IntegrationTests.Channels.bundle,
                   payload: String = "{\"aps\":{\"timestamp\":1700000000,\"event\":\"update\",\"content-state\":{\"score\":1}}}",
                   extraHeaders: [String] = [], withToken: Bool = true) throws -> Answer {
        var arguments = ["-X", "POST", "-H", "apns-push-type: \(pushType)",
                         "-H", "apns-id: \(UUID().uuidString.lowercased())", "--data-binary", payload]
        if !extraHeaders.contains(where: { $0.hasPrefix("apns-expiration") }) { arguments += ["-H", "apns-expiration: 0"] }
        if !extraHeaders.contains(where: { $0.hasPrefix("apns-priority") }) { arguments += ["-H", "apns-priority: 10"] }
        for header in extraHeaders { arguments += ["-H", header] }
        if withToken { arguments += ["-H", "authorization: bearer \(jwt)"] }
        if let channelID { arguments += ["-H", "apns-channel-id: \(channelID)"] }
        return try curl(arguments + ["https://127.0.0.1:\(emulator.port)/4/broadcasts/apps/\(bundle)"])
    }

    /// The emulator's stats as a JSON object.
    func statistics() throws -> [String: Any] {
        let answer = try curl(["https://127.0.0.1:\(emulator.port)/_herald/stats"])
        guard answer.status == 200, let object = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any] else {
            throw WaitTimeout(description: "GET /_herald/stats: \(answer)")
        }
        return object
    }

    private func curl(_ arguments: [String]) throws -> Answer {
        let headerFile = directory.path("curl-headers-\(UUID().uuidString)")
        let (_, output) = try OperationsHTTP.run("/usr/bin/env", ["curl", "-s", "--max-time", "10", "--http2", "--cacert", emulator.certificatePath,
                                                                  "-D", headerFile, "-w", "\n%{http_code}"] + arguments)
        defer { unlink(headerFile) }
        var headers: [String: String] = [:]
        for line in ((try? String(contentsOfFile: headerFile, encoding: .utf8)) ?? "").split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":"), !line.hasPrefix(":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        guard let newline = output.lastIndex(of: "\n") else { return Answer(status: 0, headers: headers, body: output) }
        return Answer(status: Int(output[output.index(after: newline)...]) ?? 0, headers: headers, body: String(output[..<newline]))
    }

    /// A string member of a one-line JSON object printed by the CLI.
    static func member(_ name: String, in text: String) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return nil }
        return object[name] as? String
    }
}
