import ArgumentParser
import Queue

struct FeedbackCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "feedback",
        abstract: "Read the device tokens APNs rejected (herald:{QUEUE}:feedback), for the backend to delete.",
        subcommands: [Tail.self])
}

extension FeedbackCommand {
    struct Tail: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tail",
            abstract: "Print the latest feedback entries; with --follow keep printing new ones until Ctrl-C.",
            discussion: """
                Each entry: id, time, reason (Unregistered, BadDeviceToken, DeviceTokenNotForTopic, or \
                wrong_environment for a token delivered only by the app's other APNs environment), \
                token (first 8 digits unless --show-tokens), topic, APNs' invalid-since timestamp (410 only), \
                the environment that accepted it (wrong_environment only) and the job it came from. \
                A broadcast whose channel APNs does not know (ChannelNotRegistered, \
                BadChannelId) shows `channel <id>` in full instead of a token (channel ids are not secrets, and \
                the backend needs them to stop using the channel); in --json it has channel_id instead of token. \
                --json prints one JSON object per line.
                """)

        @OptionGroup var queueOptions: QueueOptions
        @Flag(help: "Keep waiting for new entries (XREAD BLOCK) until SIGINT or SIGTERM.") var follow = false
        @Option(help: "Start after this entry id; $ for only entries added from now on. Default: the last --count entries.")
        var from: String?
        @Option(help: "How many entries to print (without --from: the newest this many).") var count = 10
        @Flag(name: .customLong("show-tokens"), help: "Print device tokens in full (the backend needs them to delete tokens).") var showTokens = false
        @Flag(help: "One JSON object per line.") var json = false

        func validate() throws {
            guard count >= 1 else { throw ValidationError("--count must be at least 1") }
            if let from, from != "$", StreamEntryID(from) == nil, from != "0" {
                throw ValidationError("--from must be a stream entry id (like 1718000000000-0), 0 for the beginning, or $ for new entries only")
            }
        }

        func run() throws {
            let keys = try queueOptions.singleQueue(for: "feedback " + (Self.configuration.commandName ?? ""))
            let redis = try queueOptions.blockingClient()
            let printer = FeedbackPrinter(showTokens: showTokens, json: json)
            try StreamTail.run(FeedbackReader(redis: redis, keys: keys), redis: redis, key: keys.feedback, from: from, count: count,
                               follow: follow, json: json) {
                printer.print($0, now: HumanTime.nowMilliseconds())
            }
        }
    }
}

/// Prints feedback entries as aligned lines or JSON lines, flushing after each batch.
struct FeedbackPrinter {
    let showTokens: Bool
    let json: Bool

    func print(_ entries: [FeedbackEntry], now: Int64) {
        guard !entries.isEmpty else { return }
        let lines = entries.map { json ? jsonLine($0) : textLine($0, now: now) }
        QueueToolOutput.emit(lines.joined(separator: "\n"))
    }

    func textLine(_ entry: FeedbackEntry, now: Int64) -> String {
        let subject = entry.channelID.map { "channel " + $0 } ?? QueueToolOutput.token(entry.token, show: showTokens)
        var columns = [entry.id.description, HumanTime.utc(Int64(entry.id.milliseconds)), pad(entry.reason, 22),
                       pad(subject, showTokens ? 64 : 9), entry.topic]
        if let timestamp = entry.timestamp { columns.append("invalid since \(HumanTime.utc(timestamp))") }
        if let environment = entry.environment { columns.append("accepted by \(environment)") }
        if let job = entry.job { columns.append("job \(job)") }
        return columns.joined(separator: "  ")
    }

    func jsonLine(_ entry: FeedbackEntry) -> String {
        var members: [(String, JSONValue)] = [
            ("id", .string(entry.id.description)),
            ("at", .string(HumanTime.iso8601(Int64(entry.id.milliseconds)))),
            ("reason", .string(entry.reason)),
            entry.channelID.map { ("channel_id", .string($0)) } ?? ("token", .string(QueueToolOutput.token(entry.token, show: showTokens))),
            ("topic", .string(entry.topic)),
            ("timestamp_ms", .optional(entry.timestamp)),
            ("job", .optional(entry.job)),
        ]
        // Only on wrong_environment entries, so the other entries' lines stay as they were.
        if let environment = entry.environment { members.append(("environment", .string(environment))) }
        return JSONValue.object(members).rendered(pretty: false)
    }

    private func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}
