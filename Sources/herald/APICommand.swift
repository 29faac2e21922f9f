import ArgumentParser
import Dispatch
import HeraldAPI
import Logging
import Queue
import Transport

struct APICommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "Serve the HTTP API: enqueue notifications, read queue stats, dead letters and feedback (docs/api.md).",
        discussion: """
            For backends that cannot or should not write Redis: POST /v1/notifications (one job or a batch, \
            checked as `herald enqueue` checks, Idempotency-Key honoured), GET /v1/queues/{queue}, \
            GET and requeue …/dead-letters, GET …/feedback. Every /v1 route needs `Authorization: Bearer <token>` \
            with a token from --tokens-file (one per line; reloaded when the file changes or on SIGHUP). \
            /healthz, /readyz (Redis answers) and /metrics need none. --queue names the queue of a POST that names none. \
            SIGTERM finishes the requests in flight, then exits 0.
            """)

    @OptionGroup var queueOptions: QueueOptions

    @Option(help: "Address and port to listen on, HOST:PORT (env HERALD_API_LISTEN; default 0.0.0.0:8080).")
    var listen: String?

    @Option(name: .customLong("tokens-file"),
            help: "File of bearer tokens, one per line, at least 16 characters each; # starts a comment (env HERALD_API_TOKENS_FILE; required). Re-read when it changes or on SIGHUP.")
    var tokensFile: String?

    @Option(name: .customLong("max-body-bytes"), help: "Largest request body accepted, bytes; larger ones get 413 (env HERALD_API_MAX_BODY_BYTES; default 8388608).")
    var maxBodyBytes: Int?

    @Option(name: .customLong("max-concurrent-requests"), help: "/v1 requests served at once, 1 to 10000; more get 503 busy. Memory held by requests stays under about 3 × this × --max-body-bytes (env HERALD_API_MAX_CONCURRENT_REQUESTS; default 64).")
    var maxConcurrentRequests: Int?

    @Option(name: .customLong("max-batch"), help: "Most notifications in one POST; more get 413 (env HERALD_API_MAX_BATCH; default 1000).")
    var maxBatch: Int?

    @Option(name: .customLong("idempotency-ttl"), help: "Seconds an Idempotency-Key is remembered, 1 to 604800 (env HERALD_API_IDEMPOTENCY_TTL; default 86400).")
    var idempotencyTTL: Int?

    @Option(name: .customLong("redis-connections"), help: "Redis connections, each on a thread of its own, 1 to 64 (env HERALD_API_REDIS_CONNECTIONS; default 4).")
    var redisConnections: Int?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error, critical (env HERALD_LOG_LEVEL; default info).")
    var logLevel: String?

    @Option(name: .customLong("log-format"), help: "text, json or logfmt (env HERALD_LOG_FORMAT; default text).")
    var logFormat: String?

    func run() throws {
        let configuration = try makeConfiguration()
        let logger = try makeLogger(label: "herald.api", level: logLevel, format: logFormat)
        let tokens: BearerTokens
        do {
            tokens = try BearerTokens(path: configuration.tokensFile)
        } catch {
            throw ValidationError(error.description)
        }
        let server = APIServer(configuration: configuration, tokens: tokens, logger: logger)
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let listen = "\(configuration.host):\(configuration.port)"
        let tokenCount = tokens.count
        let redis = configuration.redis.description
        Task {
            do {
                try await server.run { port in
                    logger.info("herald api listening on \(configuration.host):\(port) (Redis \(redis), \(tokenCount) token(s), max body \(configuration.maxBodyBytes) bytes, max batch \(configuration.maxBatch))")
                }
            } catch {
                outcome.set("herald api on \(listen) stopped: \(error)")
            }
            done.signal()
        }
        done.wait()
        if let failure = outcome.get() { throw ValidationError(failure) }
    }

    func makeConfiguration() throws -> APIConfiguration {
        guard let tokensFile = tokensFile ?? environmentValue("API_TOKENS_FILE") else {
            throw ValidationError("herald api needs --tokens-file FILE (or HERALD_API_TOKENS_FILE): a file with one bearer token per line, "
                + "e.g. `openssl rand -hex 32 > api-tokens`. Clients send `Authorization: Bearer <token>`.")
        }
        if try queueOptions.isCluster() {
            // Refused rather than ignored: on a cluster its writes would go to one node only.
            throw ValidationError("herald api does not run against a Redis Cluster yet (--redis-cluster, HERALD_REDIS_CLUSTER, "
                + "redis+cluster://): producers on a cluster use a cluster-aware client or `herald enqueue --redis redis+cluster://…`")
        }
        let target = try queueOptions.target()
        var configuration = APIConfiguration(redis: target.endpoint, tokensFile: tokensFile)
        configuration.sentinel = target.sentinel
        if queueOptions.queues != nil || queueOptions.shards != nil || environmentValue("QUEUES") != nil || environmentValue("SHARDS") != nil {
            throw ValidationError("herald api serves every queue, each request naming its own (?queue= or \"queue\"); --queues and --shards "
                + "(HERALD_QUEUES, HERALD_SHARDS) do not apply to it: give --queue for the queue of requests that name none")
        }
        configuration.defaultQueue = queueOptions.keys().queue
        if let problem = QueueName.problem(configuration.defaultQueue) { throw ValidationError("--queue: \(problem)") }
        let address = listen ?? environmentValue("API_LISTEN") ?? "0.0.0.0:8080"
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("--listen must be HOST:PORT such as 0.0.0.0:8080 or 127.0.0.1:9000, not \(address)")
        }
        var host = String(address[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        configuration.host = host.isEmpty ? "0.0.0.0" : host
        configuration.port = port
        configuration.maxBodyBytes = try checked("--max-body-bytes", maxBodyBytes ?? intEnvironment("API_MAX_BODY_BYTES") ?? configuration.maxBodyBytes, 1024...(1 << 30))
        configuration.maxConcurrentRequests = try checked("--max-concurrent-requests", maxConcurrentRequests ?? intEnvironment("API_MAX_CONCURRENT_REQUESTS") ?? configuration.maxConcurrentRequests, 1...10_000)
        configuration.maxBatch = try checked("--max-batch", maxBatch ?? intEnvironment("API_MAX_BATCH") ?? configuration.maxBatch, 1...100_000)
        configuration.idempotencyTTLSeconds = try checked("--idempotency-ttl", idempotencyTTL ?? intEnvironment("API_IDEMPOTENCY_TTL") ?? configuration.idempotencyTTLSeconds, 1...604_800)
        configuration.redisConnections = try checked("--redis-connections", redisConnections ?? intEnvironment("API_REDIS_CONNECTIONS") ?? configuration.redisConnections, 1...64)
        return configuration
    }

    private func checked(_ flag: String, _ value: Int, _ range: ClosedRange<Int>) throws -> Int {
        guard range.contains(value) else { throw ValidationError("\(flag) must be \(range.lowerBound) to \(range.upperBound), not \(value)") }
        return value
    }
}

/// The server task's failure, handed to the waiting main thread.
private final class Outcome: @unchecked Sendable {
    private var message: String?
    private let lock = DispatchSemaphore(value: 1)
    func set(_ text: String) { lock.wait(); message = text; lock.signal() }
    func get() -> String? { lock.wait(); defer { lock.signal() }; return message }
}
