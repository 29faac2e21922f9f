import Queue
import Transport

/// The test's own view of Redis: Herald's `RedisConnection` on a loop thread of its own, used to
/// produce jobs (pipelined XADDs) and to read what the worker wrote (stream lengths, pending
/// lists, dead letters, feedback). A dropped connection (a Redis restart) is replaced on the next
/// command. Loop-confined state is touched only on `thread`; that makes `@unchecked Sendable` true.
final class RedisClient: RedisConnectionDelegate, @unchecked Sendable {
    let thread: EventLoopThread
    let endpoint: RedisEndpoint
    private var connection: RedisConnection?  // loop only

    init(endpoint: RedisEndpoint) throws {
        thread = try EventLoopThread()
        self.endpoint = endpoint
    }

    func shutdown() {
        thread.submitAndWait { [self] in
            connection?.delegate = nil
            connection?.close()
            connection = nil
        }
        thread.shutdown()
    }

    /// The live connection, made on demand. Loop only.
    private func live() -> RedisConnection {
        if let connection { return connection }
        let connection = RedisConnection(loop: thread.loop, endpoint: endpoint)
        connection.delegate = self
        self.connection = connection
        connection.connect()
        return connection
    }

    func redisConnectionIsReady(_ connection: RedisConnection) {}

    func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        if connection === self.connection { self.connection = nil }
    }

    // MARK: commands

    /// Sends one command and returns Redis' reply (an `.error` reply is returned, not thrown).
    func send(_ arguments: [String]) async throws -> RedisReply {
        try await send(arguments: arguments.map { .text($0) })
    }

    /// Sends one command with byte arguments (binary field names, values).
    func send(arguments: [RedisArgument]) async throws -> RedisReply {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<RedisReply, any Error>) in
            thread.loop.execute { [self] in
                live().send(arguments) { result in
                    switch result {
                    case .success(let reply): continuation.resume(returning: reply)
                    case .failure(let error): continuation.resume(throwing: error)
                    }
                }
            }
        }
    }

    /// Sends one command and fails the test's expectation with Redis' message on an error reply.
    @discardableResult
    func command(_ arguments: String...) async throws -> RedisReply {
        let reply = try await send(arguments)
        if case .error(let message) = reply {
            throw RedisServerError("\(arguments.prefix(3).joined(separator: " ")): \(message)")
        }
        return reply
    }

    func integer(_ arguments: String...) async throws -> Int {
        let reply = try await send(arguments)
        guard let value = reply.integer else {
            throw RedisServerError("\(arguments.joined(separator: " ")): expected an integer, got \(reply)")
        }
        return Int(value)
    }

    /// Adds `count` entries to `stream`, `fields(i)` each, pipelined a few thousand at a time.
    /// Returns their entry ids in order.
    func xadd(_ stream: String, count: Int, fields: @escaping @Sendable (Int) -> [(String, String)]) async throws -> [String] {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[String], any Error>) in
            thread.loop.execute { [self] in
                let producer = Producer(stream: stream, count: count, fields: fields, connection: live(), continuation: continuation)
                producer.fill()
            }
        }
    }

    /// Pipelines XADDs with a bounded window; resumes once with every id or the first error.
    private final class Producer {
        let stream: String
        let count: Int
        let fields: (Int) -> [(String, String)]
        let connection: RedisConnection
        var continuation: CheckedContinuation<[String], any Error>?
        var ids: [String]
        var sent = 0
        var answered = 0

        init(stream: String, count: Int, fields: @escaping (Int) -> [(String, String)], connection: RedisConnection,
             continuation: CheckedContinuation<[String], any Error>) {
            self.stream = stream
            self.count = count
            self.fields = fields
            self.connection = connection
            self.continuation = continuation
            ids = Array(repeating: "", count: count)
        }

        func fill() {
            if count == 0 { finish(nil); return }
            while sent < count && sent - answered < 4096 {
                let index = sent
                sent += 1
                var arguments = ["XADD", stream, "*"]
                for (name, value) in fields(index) { arguments += [name, value] }
                connection.send(arguments) { [self] result in
                    switch result {
                    case .success(.error(let message)): finish(RedisServerError("XADD \(stream): \(message)"))
                    case .success(let reply):
                        ids[index] = reply.string ?? ""
                        answered += 1
                        if answered == count { finish(nil) } else { fill() }
                    case .failure(let error): finish(error)
                    }
                }
            }
        }

        func finish(_ error: (any Error)?) {
            guard let continuation else { return }
            self.continuation = nil
            if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: ids) }
        }
    }

    // MARK: reading streams

    struct Entry: Sendable, CustomStringConvertible {
        let id: String
        let fields: [String: String]
        subscript(_ name: String) -> String? { fields[name] }
        var description: String { "\(id) \(fields.filter { $0.key != "payload" || $0.value.count < 80 })" }
    }

    /// Every entry of `stream`, read in pages.
    func entries(_ stream: String) async throws -> [Entry] {
        var result: [Entry] = []
        var start = "-"
        while true {
            let reply = try await send(["XRANGE", stream, start, "+", "COUNT", "2000"])
            if case .error(let message) = reply { throw RedisServerError("XRANGE \(stream): \(message)") }
            guard case .array(let rows) = reply, !rows.isEmpty else { return result }
            for row in rows {
                guard case .array(let parts) = row, parts.count == 2, let id = parts[0].string,
                      case .array(let flat) = parts[1] else { continue }
                var fields: [String: String] = [:]
                var index = 0
                while index + 1 < flat.count {
                    if let name = flat[index].string, let value = flat[index + 1].string { fields[name] = value }
                    index += 2
                }
                result.append(Entry(id: id, fields: fields))
            }
            guard rows.count == 2000, let last = result.last?.id else { return result }
            start = "(" + last
        }
    }

    /// Entries read and not finished in `group` of `stream`: those in the group's pending list
    /// plus those of the worker's leases (`StreamLease`); 0 when the group or stream does not exist.
    func pendingCount(_ stream: String, group: String) async throws -> Int {
        try await pendingListCount(stream, group: group) + leasedCount(stream)
    }

    /// Entries in the pending list of `group` of `stream` only.
    func pendingListCount(_ stream: String, group: String) async throws -> Int {
        let reply = try await send(["XPENDING", stream, group])
        guard case .array(let parts) = reply, let first = parts.first, let count = first.integer else { return 0 }
        return Int(count)
    }

    /// Entries held under leases on `stream` and not finished (`StreamLease`).
    func leasedCount(_ stream: String) async throws -> Int {
        guard case .array(let values) = try await send(["HVALS", stream + ":leases"]) else { return 0 }
        return StreamLease.unfinished(values: values.compactMap(\.string))
    }
}
