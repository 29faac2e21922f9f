import APNs
import Hummingbird
import Logging
import NIOCore
import Queue
import ServiceLifecycle
import Synchronization
import Transport
import UnixSignals

/// `herald api`: an HTTP front door to Herald's queues for backends that cannot or should not
/// write Redis themselves. Routes (docs/api.md, docs/api.openapi.yaml):
///
/// - `POST /v1/notifications`: one job or a batch, checked as `herald enqueue` checks, added
///   atomically (`BatchEnqueue`), under an optional `Idempotency-Key`.
/// - `GET /v1/queues/{queue}`, `GET …/dead-letters`, `POST …/dead-letters/requeue`,
///   `GET …/feedback`: what `herald stats`, `dead-letters` and `feedback tail` do.
/// - `/healthz`, `/readyz` (Redis answers PING), `/metrics`; these need no token.
///
/// Every Redis access goes through the queue tools on `RedisLanes`, so Hummingbird's event
/// loops never wait on Redis.
public final class APIServer: Sendable {
    public let configuration: APIConfiguration
    public let tokens: BearerTokens
    public let metrics: APIMetrics
    public let lanes: RedisLanes
    let logger: Logger
    /// /v1 requests being served (`ConcurrencyLimitMiddleware`).
    let concurrency = RequestCounter()
    /// The running service group, for `shutdown()`.
    private let group = Mutex<ServiceGroup?>(nil)

    public init(configuration: APIConfiguration, tokens: BearerTokens, metrics: APIMetrics = APIMetrics(), logger: Logger) {
        self.configuration = configuration
        self.tokens = tokens
        self.metrics = metrics
        self.logger = logger
        lanes = RedisLanes(endpoint: configuration.redis, sentinel: configuration.sentinel, connections: configuration.redisConnections)
    }

    /// Every route the server answers, as "METHOD /path" with `{name}` parameters: what the
    /// OpenAPI document is checked against.
    public static let routes: [String] = [
        "GET /healthz", "GET /readyz", "GET /metrics",
        "POST /v1/notifications",
        "GET /v1/queues/{queue}",
        "GET /v1/queues/{queue}/dead-letters",
        "POST /v1/queues/{queue}/dead-letters/requeue",
        "GET /v1/queues/{queue}/feedback",
    ]

    /// The router with every route and middleware.
    public func router() -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: ObservingMiddleware<BasicRequestContext>(metrics: metrics, logger: logger))
        router.get("/healthz") { _, _ in JSONValue.object([("status", .string("ok"))]).response(.ok) }
        router.get("/readyz") { _, _ in try await self.ready() }
        router.get("/metrics") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: self.metrics.render())))
        }
        let v1 = router.group("v1")
            .add(middleware: ConcurrencyLimitMiddleware<BasicRequestContext>(limit: configuration.maxConcurrentRequests, gauge: concurrency))
            .add(middleware: BearerAuthMiddleware<BasicRequestContext>(tokens: tokens))
        v1.post("notifications") { request, _ in try await self.postNotifications(request) }
        v1.get("queues/{queue}") { request, context in try await self.stats(request, queue: try APIServer.queue(context)) }
        v1.get("queues/{queue}/dead-letters") { request, context in
            try await self.deadLetters(request, queue: try APIServer.queue(context))
        }
        v1.post("queues/{queue}/dead-letters/requeue") { request, context in
            try await self.requeue(request, queue: try APIServer.queue(context))
        }
        v1.get("queues/{queue}/feedback") { request, context in try await self.feedback(request, queue: try APIServer.queue(context)) }
        return router
    }

    /// Serves until one of `signals` (or `shutdown()`), then finishes the requests in flight
    /// and returns. `onListening` gets the bound port (useful with port 0).
    public func run(gracefulShutdownSignals signals: [UnixSignal] = [.sigterm, .sigint],
                    onListening: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let app = Application(
            router: router(),
            server: .http1(configuration: .init(idleTimeout: .seconds(configuration.idleTimeoutSeconds))),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "herald"),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? 0) },
            logger: logger)
        let serviceGroup = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: signals, logger: logger))
        group.withLock { $0 = serviceGroup }
        let watcher = Task { await watchTokenFile() }
        defer { watcher.cancel() }
        try await serviceGroup.run()
        await lanes.shutdown()
    }

    /// Stops accepting connections, finishes the requests in flight, and makes `run` return.
    public func shutdown() async {
        guard let serviceGroup = group.withLock({ $0 }) else { return }
        await serviceGroup.triggerGracefulShutdown()
    }

    /// Reloads the token file when it changes (checked every `tokenPollMilliseconds`) or on SIGHUP.
    func watchTokenFile() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in await UnixSignalsSequence(trapping: .sighup) {
                    self.reloadTokens(force: true, why: "SIGHUP")
                }
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(self.configuration.tokenPollMilliseconds))
                    if Task.isCancelled { break }
                    self.reloadTokens(force: false, why: "the file changed")
                }
            }
            await group.next()
            group.cancelAll()
        }
    }

    func reloadTokens(force: Bool, why: String) {
        do {
            guard let count = try tokens.reload(force: force) else { return }
            metrics.tokenReloads.increment()
            logger.info("API tokens reloaded (\(why)): \(count) token(s) in force", metadata: ["file": .string(tokens.path)])
        } catch {
            metrics.tokenReloadFailures.increment()
            logger.error("API tokens not reloaded (\(why)), the previous ones stay in force: \(error)")
        }
    }

    // MARK: Routes

    func ready() async throws -> Response {
        do {
            _ = try await lanes.run { redis in try redis.run(["PING"], timeoutMilliseconds: 2_000) }
            return JSONValue.object([("status", .string("ready")), ("redis", .string(configuration.redis.description))]).response(.ok)
        } catch {
            throw APIServer.redisFailure(error)
        }
    }

    func postNotifications(_ request: Request) async throws -> Response {
        let idempotencyKey = try Self.idempotencyKey(request)
        let body = try await Self.body(request, limit: configuration.maxBodyBytes)
        let parsed = try NotificationRequest.parse(body, maxBatch: configuration.maxBatch)
        let fromQuery = request.uri.queryParameters.get("queue")
        if let fromQuery, let fromBody = parsed.queue, fromQuery != fromBody {
            throw APIError.malformed("The query names queue \(DeadLetterText.quoted(fromQuery)) and the body \(DeadLetterText.quoted(fromBody)); name it once.")
        }
        let queue = try Self.checkedQueue(fromQuery ?? parsed.queue ?? configuration.defaultQueue)
        let jobs = parsed.jobs
        // A request is one atomic script on one stream: the urgent lane when every job of it is
        // urgent (by its `lane`, or alert/voip at priority 10), else the bulk lane.
        let allUrgent = !jobs.isEmpty && jobs.allSatisfy { JobLane.of(bytes: $0) == .urgent }
        let keys = allUrgent ? QueueKeys(queue: queue).urgentLane : QueueKeys(queue: queue)
        let idempotency = idempotencyKey.map { key in
            BatchEnqueue.Idempotency(key: BatchEnqueue.key(keys, idempotencyKey: key),
                                     fingerprint: BatchEnqueue.fingerprint(queue: queue, jobs: jobs),
                                     ttlMilliseconds: Int64(configuration.idempotencyTTLSeconds) * 1000)
        }
        let timeout = configuration.redisTimeoutMilliseconds
        let outcome: BatchEnqueue.Outcome
        do {
            outcome = try await lanes.run { redis in
                try BatchEnqueue.run(redis: redis, keys: keys, jobs: jobs, idempotency: idempotency, timeoutMilliseconds: timeout)
            }
        } catch {
            throw APIServer.redisFailure(error)
        }
        switch outcome {
        case .added(let ids):
            metrics.enqueued(ids.count, queue: queue)
            return Self.accepted(keys: keys, ids: ids, replayed: false)
        case .replayed(let ids):
            metrics.replays.increment()
            return Self.accepted(keys: keys, ids: ids, replayed: true)
        case .conflict:
            metrics.conflicts.increment()
            throw APIError(.unprocessableContent, "idempotency_key_reused",
                           "This Idempotency-Key was already used for a different request on queue \(DeadLetterText.quoted(queue)) "
                               + "within the last \(configuration.idempotencyTTLSeconds) s; nothing was enqueued. Use a new key for new notifications.")
        }
    }

    static func accepted(keys: QueueKeys, ids: [String], replayed: Bool) -> Response {
        JSONValue.object([
            ("queue", .string(keys.queue)),
            ("stream", .string(keys.jobs)),
            ("ids", .array(ids.map { .string($0) })),
            ("replayed", .bool(replayed)),
        ]).response(.accepted, headers: replayed ? [(HeaderName("Idempotent-Replayed")!, "true")] : [])
    }

    func stats(_ request: Request, queue: String) async throws -> Response {
        let keys = QueueKeys(queue: queue)
        let stats: QueueStats
        do {
            stats = try await lanes.run { redis in try QueueInspector(redis: redis).stats(keys: keys) }
        } catch {
            throw APIServer.redisFailure(error)
        }
        return stats.json(sampledAtText: true).response(.ok)
    }

    func deadLetters(_ request: Request, queue: String) async throws -> Response {
        let keys = QueueKeys(queue: queue)
        let query = request.uri.queryParameters
        let count = try Self.count(query.get("count"), default: 50)
        let cursor = try Self.cursor(query.get("cursor"))
        let reasons = Self.list(query.get("reason"))
        let full = try Self.flag(query.get("full"), name: "full")
        let showTokens = try Self.flag(query.get("show_tokens"), name: "show_tokens")
        let result: (DeadLetterTools.Selection, Int)
        do {
            result = try await lanes.run { redis in
                let tools = DeadLetterTools(redis: redis, keys: keys)
                let selection = try tools.select(DeadLetterFilter(reasons: reasons, after: cursor), limit: count)
                return (selection, try tools.count())
            }
        } catch {
            throw APIServer.redisFailure(error)
        }
        return QueueJSON.deadLetters(result.0, keys: keys, total: result.1, full: full, showTokens: showTokens).response(.ok)
    }

    func requeue(_ request: Request, queue: String) async throws -> Response {
        let keys = QueueKeys(queue: queue)
        let body = try await Self.body(request, limit: 1 << 20)
        let ask = try RequeueRequest.parse(body)
        let limit = ask.limit ?? 1000
        let result: RequeueResult
        do {
            result = try await lanes.run { redis in try RequeueResult.run(redis: redis, keys: keys, ask: ask, limit: limit) }
        } catch {
            throw APIServer.redisFailure(error)
        }
        return result.json(keys: keys).response(.ok)
    }

    func feedback(_ request: Request, queue: String) async throws -> Response {
        let keys = QueueKeys(queue: queue)
        let query = request.uri.queryParameters
        let count = try Self.count(query.get("count"), default: 10)
        let cursorText = query.get("cursor")
        let cursor: StreamEntryID?
        if cursorText == "0" { cursor = StreamEntryID(milliseconds: 0, sequence: 0) } else { cursor = try Self.cursor(cursorText) }
        let showTokens = try Self.flag(query.get("show_tokens"), name: "show_tokens")
        let result: ([FeedbackEntry], StreamEntryID)
        do {
            result = try await lanes.run { redis in
                let reader = FeedbackReader(redis: redis, keys: keys)
                if let cursor {
                    let entries = try reader.after(cursor, count: count)
                    return (entries, entries.last?.id ?? cursor)
                }
                let entries = try reader.last(count)
                return (entries, try entries.last?.id ?? reader.lastID())
            }
        } catch {
            throw APIServer.redisFailure(error)
        }
        return QueueJSON.feedback(result.0, keys: keys, next: result.1, showTokens: showTokens).response(.ok)
    }

    // MARK: Request pieces

    static func queue(_ context: BasicRequestContext) throws -> String {
        try checkedQueue(context.parameters.get("queue") ?? "")
    }

    static func checkedQueue(_ name: String) throws -> String {
        if let problem = QueueName.problem(name) { throw APIError.malformed(problem.prefix(1).uppercased() + problem.dropFirst() + ".") }
        return name
    }

    /// The body, at most `limit` bytes (413 beyond, before reading it when Content-Length says so).
    static func body(_ request: Request, limit: Int) async throws -> [UInt8] {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit {
            throw APIError.bodyTooLarge(limit)
        }
        do {
            let buffer = try await request.body.collect(upTo: limit)
            return Array(buffer.readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge(limit)
        }
    }

    static func idempotencyKey(_ request: Request) throws -> String? {
        guard let name = HeaderName("Idempotency-Key"), let key = request.headers[name] else { return nil }
        guard (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw APIError.malformed("The Idempotency-Key header must be 1 to 255 printable ASCII characters without spaces (a UUID is a good key).")
        }
        return key
    }

    static func count(_ text: String?, default value: Int) throws -> Int {
        guard let text else { return value }
        guard let count = Int(text), (1...APIConfiguration.maxPageCount).contains(count) else {
            throw APIError.malformed("`count` must be a whole number from 1 to \(APIConfiguration.maxPageCount), not \(DeadLetterText.quoted(text)).")
        }
        return count
    }

    static func cursor(_ text: String?) throws -> StreamEntryID? {
        guard let text else { return nil }
        guard let id = StreamEntryID(text) else {
            throw APIError.malformed("`cursor` must be a stream entry id like 1718000000000-0 (the `next_cursor` of the previous page), not \(DeadLetterText.quoted(text)).")
        }
        return id
    }

    static func flag(_ text: String?, name: String) throws -> Bool {
        switch text {
        case nil, "false": return false
        case "true": return true
        case let other?: throw APIError.malformed("`\(name)` must be true or false, not \(DeadLetterText.quoted(other)).")
        }
    }

    static func list(_ text: String?) -> Set<String>? {
        guard let text else { return nil }
        let items = text.split(separator: ",").map { String($0).trimmingWhitespace() }.filter { !$0.isEmpty }
        return items.isEmpty ? nil : Set(items)
    }

    /// A Redis failure as the client sees it: 503 (try again) when Redis is unreachable, slow
    /// or lost, else 500; the message names Redis' endpoint, never its password.
    static func redisFailure(_ error: any Error) -> any Error {
        if error is APIError { return error }
        guard let error = error as? QueueToolError else {
            return APIError(.internalServerError, "internal_error", "The API failed: \(error)")
        }
        switch error {
        case .unreachable, .authenticationFailed, .masterNotFound:
            return APIError(.serviceUnavailable, "redis_unavailable", "Redis is not available: \(error) Nothing was changed by this request; try again.",
                            headers: [(.retryAfter, "1")])
        case .connectionLost, .timedOut, .interrupted:
            // The command may have reached Redis before the answer was lost: it may still run.
            return APIError(.serviceUnavailable, "redis_unavailable",
                            "Redis did not answer in time: \(error) The request may or may not have taken effect; "
                                + "retry it with the same Idempotency-Key to have its notifications enqueued exactly once.",
                            headers: [(.retryAfter, "1")])
        case .server, .unexpectedReply, .invalidArgument:
            return APIError(.internalServerError, "redis_error", "\(error)")
        }
    }
}

extension APIError {
    static func bodyTooLarge(_ limit: Int) -> APIError {
        APIError(.contentTooLarge, "body_too_large",
                 "The request body is larger than \(limit) bytes, the most this server accepts (--max-body-bytes). Send fewer notifications per request.")
    }
}
