import Queue

/// A reader of one of a queue's streams that `herald … tail` prints: the feedback stream and the
/// results stream.
protocol TailedStreamReader {
    associatedtype Entry
    func last(_ count: Int) throws -> [Entry]
    func after(_ id: StreamEntryID, count: Int) throws -> [Entry]
    func lastID() throws -> StreamEntryID
    func wait(after id: StreamEntryID, blockMilliseconds: Int, count: Int) throws -> [Entry]
    static func id(of entry: Entry) -> StreamEntryID
}

extension FeedbackReader: TailedStreamReader {
    static func id(of entry: FeedbackEntry) -> StreamEntryID { entry.id }
}

extension ResultsReader: TailedStreamReader {
    static func id(of entry: ResultEntry) -> StreamEntryID { entry.id }
}

/// What `herald feedback tail` and `herald results tail` share: the newest `count` entries (or
/// those after `from`; `$` for none), then with `follow` every new entry until SIGINT or SIGTERM,
/// riding out a Redis restart (a note, a reconnect every second, and on after the last entry
/// printed).
enum StreamTail {
    /// `emptyNote`: said when the stream has nothing to print and the command will not wait.
    static func run<Reader: TailedStreamReader>(_ reader: Reader, redis: any QueueToolRedis, key: String, from: String?, count: Int,
                                                follow: Bool, json: Bool, emptyNote: String? = nil,
                                                print: ([Reader.Entry]) -> Void) throws {
        if follow { try redis.stopOnSignals() }
        var last: StreamEntryID
        switch from {
        case "$"?:
            last = try reader.lastID()
            if !follow { QueueToolOutput.note("--from $ without --follow prints nothing: it starts after the newest entry") }
        case let id?:
            let start = StreamEntryID(id) ?? StreamEntryID(milliseconds: 0, sequence: 0)
            let entries = try reader.after(start, count: count)
            print(entries)
            last = entries.last.map(Reader.id(of:)) ?? start
        case nil:
            let entries = try reader.last(count)
            if entries.isEmpty && !json && !follow, let emptyNote { QueueToolOutput.note(emptyNote) }
            print(entries)
            last = try entries.last.map(Reader.id(of:)) ?? reader.lastID()
        }
        guard follow else { return }
        if !json { QueueToolOutput.note("following \(key) after \(last); Ctrl-C to stop") }
        var failures = 0
        while true {
            do {
                let entries = try reader.wait(after: last, blockMilliseconds: 5_000, count: 500)
                failures = 0
                print(entries)
                if let newest = entries.last { last = Reader.id(of: newest) }
            } catch QueueToolError.interrupted {
                return
            } catch let error as QueueToolError {
                // Redis restarted or the network blinked: say so, wait, and carry on after `last`.
                switch error {
                case .connectionLost, .unreachable, .timedOut:
                    failures += 1
                    if failures == 1 || failures % 30 == 0 {
                        QueueToolOutput.note("Redis at \(redis.targetDescription) is gone (\(error)); reconnecting every second, Ctrl-C to stop")
                    }
                    redis.reconnect()
                    // Wait a second on the loop, so Ctrl-C still ends the command at once.
                    try? redis.idle(milliseconds: 1_000)
                    if redis.interrupted { return }
                default:
                    throw error
                }
            }
        }
    }
}
