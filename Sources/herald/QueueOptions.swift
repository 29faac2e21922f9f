import ArgumentParser
import Queue
import Transport

/// Which Redis and which queue.
struct QueueOptions: ParsableArguments {
    @Option(help: "Redis URL, redis://[user[:password]@]host[:port][/db] (env HERALD_REDIS; default redis://127.0.0.1:6379).")
    var redis: String?

    @Option(help: "Queue name: keys are herald:{QUEUE}:jobs, :retry, :dead, :feedback (env HERALD_QUEUE; default default).")
    var queue: String?

    func endpoint() throws -> RedisEndpoint {
        do {
            return try RedisEndpoint(url: redis ?? environmentValue("REDIS") ?? "redis://127.0.0.1:6379")
        } catch {
            throw ValidationError(error.description)
        }
    }

    func keys() -> QueueKeys {
        QueueKeys(queue: queue ?? environmentValue("QUEUE") ?? QueueKeys.defaultQueue)
    }
}
