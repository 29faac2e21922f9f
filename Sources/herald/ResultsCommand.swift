import ArgumentParser
import Queue

struct ResultsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "results",
        abstract: "Read what happened to each notification (herald:{QUEUE}:results), when results are on.",
        discussion: """
            The worker writes one entry per notification outcome when it runs with --results \
            (or --results-queues, HERALD_RESULTS, results: in its config file), and for any job \
            with receipt=1.
            """,
        subcommands: [Tail.self])
}

extension ResultsCommand {
    struct Tail: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tail",
            abstract: "Print the latest results; with --follow keep printing new ones until Ctrl-C.",
            discussion: """
                Each entry: id, time, status (accepted, dead_token, dead_lettered, superseded), \
                reason, HTTP status, token (first 8 digits unless --show-tokens) and its index in a \
                fan-out job, the job it came from, the apns-id and APNs' apns-unique-id. --json \
                prints one JSON object per line.
                """)

        @OptionGroup var queueOptions: QueueOptions
        @Flag(help: "Keep waiting for new entries (XREAD BLOCK) until SIGINT or SIGTERM.") var follow = false
        @Option(help: "Start after this entry id; $ for only entries added from now on. Default: the last --count entries.")
        var from: String?
        @Option(help: "How many entries to print (without --from: the newest this many; default 10).") var count = 10
        @Flag(name: .customLong("show-tokens"), help: "Print device tokens in full (default: the first 8 digits).") var showTokens = false
        @Flag(help: "One JSON object per line.") var json = false

        func validate() throws {
            guard count >= 1 else { throw ValidationError("--count must be at least 1") }
            if let from, from != "$", StreamEntryID(from) == nil, from != "0" {
                throw ValidationError("--from must be a stream entry id (like 1718000000000-0), 0 for the beginning, or $ for new entries only")
            }
        }

        func run() throws {
            let keys = try queueOptions.singleQueue(for: "results " + (Self.configuration.commandName ?? ""))
            let redis = try queueOptions.blockingClient()
            let printer = ResultsPrinter(showTokens: showTokens, json: json)
            try StreamTail.run(ResultsReader(redis: redis, keys: keys), redis: redis, key: keys.results, from: from, count: count,
                               follow: follow, json: json,
                               emptyNote: "\(keys.results) is empty: start the worker with --results (or give jobs receipt=1) to get results") {
                printer.print($0)
            }
        }
    }
}

/// Prints results as aligned lines or JSON lines, flushing after each batch.
struct ResultsPrinter {
    let showTokens: Bool
    let json: Bool

    func print(_ entries: [ResultEntry]) {
        guard !entries.isEmpty else { return }
        let lines = entries.map { json ? jsonLine($0) : textLine($0) }
        QueueToolOutput.emit(lines.joined(separator: "\n"))
    }

    func textLine(_ entry: ResultEntry) -> String {
        var columns = [entry.id.description, HumanTime.utc(entry.at), pad(entry.status, 13), pad(entry.reason ?? "-", 22),
                       pad(String(entry.httpStatus), 3), pad(QueueToolOutput.token(entry.token, show: showTokens), showTokens ? 64 : 9)]
        if let index = entry.index { columns.append("#\(index)") }
        columns.append("job \(entry.job)")
        if let apnsID = entry.apnsID { columns.append("apns-id \(apnsID)") }
        if let unique = entry.uniqueID { columns.append("unique-id \(unique)") }
        return columns.joined(separator: "  ")
    }

    func jsonLine(_ entry: ResultEntry) -> String {
        JSONValue.object([
            ("id", .string(entry.id.description)),
            ("job", .string(entry.job)),
            ("token", .string(QueueToolOutput.token(entry.token, show: showTokens))),
            ("index", .optional(entry.index)),
            ("status", .string(entry.status)),
            ("reason", .optional(entry.reason)),
            ("http_status", .integer(Int64(entry.httpStatus))),
            ("apns_id", .optional(entry.apnsID)),
            ("apns_unique_id", .optional(entry.uniqueID)),
            ("at_ms", .integer(entry.at)),
            ("at", .string(HumanTime.iso8601(entry.at))),
            ("attempts", .integer(Int64(entry.attempts))),
        ]).rendered(pretty: false)
    }

    private func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}
