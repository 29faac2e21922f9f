import APNs
import ArgumentParser
import Glibc
import HeraldConfig
import Logging
import Transport
import Worker

/// `herald channels create|list|show|delete`: the broadcast channel management API of APNs
/// (Live Activities sent to every subscriber of a channel), with the app's provider token.
struct ChannelsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "Create, list, show and delete an app's broadcast channels (Live Activity broadcast push).",
        discussion: """
            Talks to APNs' channel management API, which has its own hosts: \
            api-manage-broadcast.sandbox.push.apple.com:2195 (--environment sandbox) and \
            api-manage-broadcast.push.apple.com:2196 (production); --channels-host HOST:PORT \
            overrides them (e.g. the port `herald mock-apns` prints as `channels on`). It uses the \
            app's provider token, from the same flags, HERALD_* variables and config file (--config, \
            --app) as `herald send`. An app has at most 10,000 channels per environment.

              herald channels create --storage none --bundle-id com.example.app --team-id ... \\
                --key-id ... --key-file AuthKey.p8 --environment sandbox
              herald channels list ...
              herald channels show CHANNEL-ID ...
              herald channels delete CHANNEL-ID ...

            Exits 0 on success, 1 when APNs refused the request (its reason is printed with what to \
            do), 69 when the API cannot be reached or does not answer in --timeout, 78 for missing \
            or refused credentials.
            """,
        subcommands: [Create.self, List.self, Show.self, Delete.self])

    /// What every subcommand shares: where the API is, who the app is, how to print.
    struct Common: ParsableArguments {
        @Option(help: "APNs environment; picks the channel management host unless --channels-host is given (env HERALD_ENVIRONMENT; default production).")
        var environment: APNsEnvironment?
        @Option(name: .customLong("channels-host"), help: "Override the channel management API as HOST:PORT, e.g. 127.0.0.1:PORT for the emulator (env HERALD_CHANNELS_HOST; default api-manage-broadcast.push.apple.com:2196, or api-manage-broadcast.sandbox.push.apple.com:2195 with --environment sandbox).")
        var channelsHost: String?
        @Option(name: .customLong("ca-file"), help: "An extra trusted CA certificate (PEM), e.g. the emulator's (env HERALD_CA_FILE; default none: the system's CAs). Verification is always on.")
        var caFile: String?
        @Option(name: .customLong("bundle-id"), help: "The app's bundle id (env HERALD_BUNDLE_ID; or the config file app's bundle_id; no default).")
        var bundleID: String?
        @Option(help: "The app in --config to act for (default: default).")
        var app: String?
        @Option(help: "The worker's YAML or JSON config file, for --app (env HERALD_CONFIG; default none: flags and HERALD_* only).")
        var config: String?
        @OptionGroup(title: "Provider-token credentials") var credentials: CredentialsOptions
        @Flag(help: "Print JSON instead of a table (default: a table).") var json = false
        @Option(help: "Give up after this many seconds, 1 to 3600 (default 30).") var timeout = 30

        func validate() throws {
            guard (1...3600).contains(timeout) else { throw ValidationError("--timeout must be 1 to 3600 seconds, not \(timeout)") }
        }

        /// Host, port, bundle id and a fresh provider token, all checked.
        func resolve() throws -> ChannelsTarget {
            let file = try CommandFailure.configuring { try (config ?? environmentValue("CONFIG")).map(ConfigFile.load) }
            let appName = app ?? "default"
            let fileApp = file?.apps?[appName]
            if file != nil, fileApp == nil, app != nil {
                throw CommandFailure.configuration("no app \(appName) in the config file; it has: \((file?.apps?.keys.sorted() ?? []).joined(separator: ", "))")
            }
            let environmentName = environment?.rawValue ?? environmentValue("ENVIRONMENT") ?? fileApp?.environment ?? "production"
            guard let chosen = APNsEnvironment(rawValue: environmentName) else {
                throw CommandFailure.configuration("the APNs environment (HERALD_ENVIRONMENT or environment) must be production or sandbox, not \(environmentName)")
            }
            let address = channelsHost ?? environmentValue("CHANNELS_HOST")
                ?? (chosen == .sandbox ? "api-manage-broadcast.sandbox.push.apple.com:2195" : "api-manage-broadcast.push.apple.com:2196")
            guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
                  (1...65_535).contains(port), colon > address.startIndex else {
                throw ValidationError("--channels-host takes HOST:PORT, e.g. 127.0.0.1:2195; got \(address)")
            }
            guard let bundle = bundleID ?? environmentValue("BUNDLE_ID") ?? fileApp?.bundleID, !bundle.isEmpty else {
                throw ValidationError("give --bundle-id (or HERALD_BUNDLE_ID, or bundle_id in the config file's app): channels belong to an app")
            }
            guard !bundle.contains("/"), bundle.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw ValidationError("--bundle-id must be printable ASCII without spaces or '/', got \(bundle)")
            }
            let resolved = appName == "default" ? try credentials.resolved(file: fileApp, appName: appName)
                : try CredentialsOptions.resolved(fileApp: fileApp, appName: appName)
            // Minting a token logs at info; a one-shot tool keeps its output to the answer.
            var logger = Logger(label: "herald.channels")
            logger.logLevel = .warning
            let jwt: String
            do {
                jwt = try resolved.tokenSource(time: .system, logger: logger).mint().jwt
            } catch {
                throw CommandFailure.configuration("could not sign a provider token: \(error) (check --key-file and its key)")
            }
            let tls: TLSContext
            let ca = caFile ?? environmentValue("CA_FILE") ?? fileApp?.caFile
            do {
                tls = try TLSContext(clientTrusting: ca)
            } catch {
                throw CommandFailure.configuration("TLS set-up failed: \(error) (check --ca-file)")
            }
            return ChannelsTarget(host: String(address[..<colon]), port: port, bundleID: bundle, jwt: jwt, tls: tls,
                                  timeoutMilliseconds: Int64(timeout) * 1000)
        }
    }

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a channel and print its id (give it to the app, which subscribes its Live Activities to it).")
        @Option(help: """
            Message storage: none (policy 0: APNs keeps nothing, broadcasts must have expiration 0, and \
            the app's budget of such channels is the larger) or most-recent (policy 1: the latest \
            broadcast is kept for devices that join later). Default none: the cheaper policy; choose \
            most-recent only when late joiners need the current state.
            """)
        var storage: StorageOption = .none
        @OptionGroup var common: Common

        func run() throws {
            let target = try common.resolve()
            let body = "{\"message-storage-policy\":\(storage.policy),\"push-type\":\"LiveActivity\"}"
            let answer = try target.request("POST", "channels", body: Array(body.utf8))
            guard answer.status == 201, let id = answer.header("apns-channel-id") else { throw target.refusal(answer, doing: "create a channel") }
            if common.json {
                QueueToolOutput.emit("{\"channel_id\":\"\(ChannelsTarget.escaped(id))\",\"message_storage_policy\":\(storage.policy),\"push_type\":\"LiveActivity\"}")
            } else {
                QueueToolOutput.emit(QueueToolOutput.table(["CHANNEL ID", "STORAGE", "PUSH TYPE"], [[id, storage.rawValue, "LiveActivity"]]))
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the app's channel ids.")
        @OptionGroup var common: Common

        func run() throws {
            let target = try common.resolve()
            let answer = try target.request("GET", "all-channels")
            guard answer.status == 200 else { throw target.refusal(answer, doing: "list channels") }
            let ids = answer.body.withUnsafeBufferPointer { bytes -> [String]? in
                let json = JSONScanner(bytes)
                guard let root = try? json.validate(), root.kind == .object, let list = json.rootMember("channels"), list.kind == .array else { return nil }
                var ids: [String] = []
                try? json.forEachElement(of: list) { element in
                    if let text = json.string(element) { ids.append(text) }
                }
                return ids
            }
            guard let ids else {
                throw CommandFailure.unavailable("the channel management API answered 200 without a {\"channels\":[…]} body: \(QueueToolOutput.printable(answer.body, limit: 200))")
            }
            if common.json {
                QueueToolOutput.emit("{\"channels\":[" + ids.map { "\"\(ChannelsTarget.escaped($0))\"" }.joined(separator: ",") + "]}")
            } else if ids.isEmpty {
                QueueToolOutput.emit("no channels for \(target.bundleID)")
            } else {
                QueueToolOutput.emit(QueueToolOutput.table(["CHANNEL ID"], ids.map { [$0] }))
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one channel's settings.")
        @Argument(help: "The channel id (as `create` or `list` printed it).") var id: String
        @OptionGroup var common: Common

        func run() throws {
            let target = try common.resolve()
            let answer = try target.request("GET", "channels", channelID: id)
            guard answer.status == 200 else { throw target.refusal(answer, doing: "read channel \(id)") }
            let settings = answer.body.withUnsafeBufferPointer { bytes -> (Int64?, String?) in
                let json = JSONScanner(bytes)
                guard let root = try? json.validate(), root.kind == .object else { return (nil, nil) }
                return (json.rootMember("message-storage-policy").flatMap { json.int64($0) }, json.rootMember("push-type").flatMap { json.string($0) })
            }
            let storage = settings.0.map { $0 == 0 ? "none" : $0 == 1 ? "most-recent" : "policy \($0)" } ?? "?"
            if common.json {
                QueueToolOutput.emit("{\"channel_id\":\"\(ChannelsTarget.escaped(id))\",\"message_storage_policy\":\(settings.0.map(String.init) ?? "null"),"
                    + "\"push_type\":" + (settings.1.map { "\"\(ChannelsTarget.escaped($0))\"" } ?? "null") + "}")
            } else {
                QueueToolOutput.emit(QueueToolOutput.table(["CHANNEL ID", "STORAGE", "PUSH TYPE"], [[id, storage, settings.1 ?? "?"]]))
            }
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a channel: broadcasts to it are refused (ChannelNotRegistered) from then on.")
        @Argument(help: "The channel id.") var id: String
        @OptionGroup var common: Common

        func run() throws {
            let target = try common.resolve()
            let answer = try target.request("DELETE", "channels", channelID: id)
            guard answer.status == 204 || answer.status == 200 else { throw target.refusal(answer, doing: "delete channel \(id)") }
            QueueToolOutput.emit(common.json ? "{\"deleted\":\"\(ChannelsTarget.escaped(id))\"}" : "deleted \(id)")
        }
    }
}

enum StorageOption: String, ExpressibleByArgument, CaseIterable {
    case none
    case mostRecent = "most-recent"

    var policy: Int { self == .none ? 0 : 1 }
}

/// A resolved channel management API: where, for which app, with which token.
struct ChannelsTarget {
    let host: String
    let port: Int
    let bundleID: String
    /// The provider token: sent as a header, never printed.
    let jwt: String
    let tls: TLSContext
    let timeoutMilliseconds: Int64

    /// Sends one request to `/1/apps/<bundle id>/<resource>`; an unreachable or silent API is 69.
    func request(_ method: String, _ resource: String, channelID: String? = nil, body: [UInt8] = []) throws -> HTTP2Response {
        var headers: [(name: String, value: String)] = [("authorization", "bearer " + jwt)]
        if let channelID { headers.append(("apns-channel-id", channelID)) }
        if !body.isEmpty { headers.append(("content-type", "application/json")) }
        let result = try HTTP2RequestConnection.perform(
            host: host, port: port, tlsContext: tls, method: method, path: "/1/apps/\(bundleID)/\(resource)",
            headers: headers, body: body, timeoutMilliseconds: timeoutMilliseconds)
        switch result {
        case .success(let answer): return answer
        case .failure(let error):
            throw CommandFailure.unavailable("cannot reach the channel management API at \(host):\(port): \(error)")
        }
    }

    /// APNs' refusal as a failure that names the reason and what to do about it.
    func refusal(_ answer: HTTP2Response, doing what: String) -> CommandFailure {
        let reason = answer.body.withUnsafeBufferPointer { bytes -> String? in
            let json = JSONScanner(bytes)
            guard let root = try? json.validate(), root.kind == .object, let value = json.rootMember("reason") else { return nil }
            return json.string(value).map { String($0.prefix(64)) }
        } ?? "no reason given"
        let advice: String
        switch reason {
        case "MissingProviderToken", "InvalidProviderToken", "ExpiredProviderToken":
            return CommandFailure.configuration("APNs refused the provider token (\(answer.status) \(reason)) trying to \(what): check --team-id, --key-id and --key-file")
        case "ChannelNotRegistered": advice = "no such channel for \(bundleID) in this environment: check the id with `herald channels list`"
        case "BadChannelId", "MissingChannelId": advice = "give a channel id as `herald channels create` or `list` printed it"
        case "CannotCreateChannelConfig", "TooManyChannels": advice = "the app has reached its channel limit (10,000 per environment): delete channels it no longer uses"
        case "FeatureNotEnabled": advice = "broadcast push is not enabled for this app: enable it for the app's identifier in the developer account"
        case "TopicMismatch", "BadTopic": advice = "the bundle id does not match the key's team or carries a push-type suffix: give the app's plain bundle id"
        case "BadMessageStoragePolicy": advice = "--storage must be none or most-recent"
        case "TooManyRequests": advice = "APNs is throttling channel requests: wait and try again"
        default: advice = answer.status >= 500 ? "APNs had a problem: try again later" : "see the reason above"
        }
        return CommandFailure(status: .failure, description: "APNs refused to \(what): \(answer.status) \(reason): \(advice)")
    }

    /// `text` escaped for a JSON string.
    static func escaped(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }
}
