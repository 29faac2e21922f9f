import APNs
import ArgumentParser
import Logging
import Queue
import Transport

struct EnqueueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Add jobs to a queue, validated first (one, or --count N copies for trials).",
        discussion: """
            A job is one stream entry of flat fields; any Redis client can add one (see docs/job-format.md). \
            This command checks the job first and says what is wrong instead of adding it.
            """)

    @OptionGroup var queueOptions: QueueOptions
    @Option(help: "Device token, hex.") var token: String?
    @Option(help: "Comma-separated device tokens (fan-out of one payload, up to 10,000).") var tokens: String?
    @Option(help: "The notification's JSON payload.") var payload: String?
    @Option(help: "apns-topic (default: the worker's --bundle-id plus the push type's suffix).") var topic: String?
    @Option(name: .customLong("push-type"), help: "apns-push-type (default alert).") var pushType: String?
    @Option(help: "apns-priority: 10, 5 or 1.") var priority: String?
    @Option(help: "apns-expiration in UNIX seconds (0: try once).") var expiration: String?
    @Option(name: .customLong("collapse-id"), help: "apns-collapse-id.") var collapseID: String?
    @Option(help: "apns-id (canonical lowercase UUID); derived from the entry when absent.") var id: String?
    @Option(help: "How many copies to add (trials and benchmarks).") var count = 1
    @Option(name: .customLong("distinct-tokens"), help: "With --count: vary the last bytes of --token so copies go to this many distinct tokens.") var distinctTokens: Int?

    func run() throws {
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        var fields: [(name: String, value: [UInt8])] = []
        func add(_ name: String, _ value: String?) { if let value { fields.append((name, Array(value.utf8))) } }
        add(JobField.token, token)
        add(JobField.tokens, tokens)
        add(JobField.payload, payload)
        add(JobField.topic, topic)
        add(JobField.pushType, pushType)
        add(JobField.priority, priority)
        add(JobField.expiration, expiration)
        add(JobField.collapseID, collapseID)
        add(JobField.id, id)
        // Validate as the worker will; a missing topic is the worker's to fill in from its bundle id.
        let defaults = JobDefaults(bundleID: topic == nil ? "com.example.validation" : nil)
        if case .failure(let error) = JobDecoder.decode(entryID: StreamEntryID(milliseconds: 1, sequence: 0), fields: fields, defaults: defaults) {
            throw ValidationError("not enqueued (\(error.code)): \(error.description)")
        }
        if case .success(let job) = JobDecoder.decode(entryID: StreamEntryID(milliseconds: 1, sequence: 0), fields: fields, defaults: defaults),
           let bad = job.invalidTokens.first {
            throw ValidationError("not enqueued (\(bad.error.code)): \(bad.error.description)")
        }
        if id != nil && count > 1 {
            throw ValidationError("--id with --count would send one apns-id many times; leave --id out and Herald derives one per entry")
        }
        let keys = queueOptions.keys()
        var endpoint = try queueOptions.endpoint()
        if try queueOptions.isCluster() {
            // The queue's keys live on one master: XADD goes straight to it.
            endpoint = try ClusterRedisClient(seeds: queueOptions.clusterSeeds()).endpoint(forQueue: keys.queue)
        }
        let loop = try EventLoop()
        let connection = RedisConnection(loop: loop, endpoint: endpoint)
        let enqueue = Enqueuer(loop: loop, connection: connection, keys: keys, fields: fields, count: count,
                               baseToken: token, distinctTokens: distinctTokens)
        connection.delegate = enqueue
        connection.connect()
        let started = EventLoop.monotonicMilliseconds()
        loop.run()
        if let error = enqueue.error { throw ValidationError(error) }
        let elapsed = max(1, EventLoop.monotonicMilliseconds() - started)
        if count == 1, let first = enqueue.firstID {
            print(first)
        } else {
            print("enqueued \(enqueue.added) jobs to \(keys.jobs) in \(formatSeconds(Double(elapsed) / 1000)) s")
        }
    }
}
