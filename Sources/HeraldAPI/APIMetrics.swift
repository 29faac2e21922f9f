import Observability
import Prometheus
import Synchronization

/// The API's own metrics, served on its /metrics: requests by route, method and status, their
/// latency by route, jobs enqueued by queue, idempotent replays, token-file reloads, and the
/// standard `process_*` metrics (Observability's `ProcessMetrics`, as the worker exports them).
///
/// Routes are the templates (`/v1/queues/{queue}`), never the paths, and a path no route
/// matches is `unmatched`, so a scanner probing random URLs cannot grow the label set.
public final class APIMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    let process = ProcessMetrics()
    private let requests = Mutex<[String: Prometheus.Counter]>([:])
    private let durations = Mutex<[String: DurationHistogram]>([:])
    private let enqueued = Mutex<[String: Prometheus.Counter]>([:])
    let replays: Prometheus.Counter
    let conflicts: Prometheus.Counter
    let tokenReloads: Prometheus.Counter
    let tokenReloadFailures: Prometheus.Counter
    let inFlight: Prometheus.Gauge
    /// At most this many queues get their own `herald_api_notifications_enqueued_total` series.
    static let maxQueueLabels = 1000

    static let buckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]

    public init() {
        registry = PrometheusCollectorRegistry()
        replays = registry.makeCounter(descriptor: .init(metricName: "herald_api_idempotent_replays", unitName: "total",
                                                          helpText: "Requests answered from an Idempotency-Key's stored result, nothing enqueued."))
        conflicts = registry.makeCounter(descriptor: .init(metricName: "herald_api_idempotency_conflicts", unitName: "total",
                                                            helpText: "Requests refused because their Idempotency-Key was used for other jobs."))
        tokenReloads = registry.makeCounter(descriptor: .init(metricName: "herald_api_token_reloads", unitName: "total",
                                                               helpText: "Times the bearer-token file was read after a change or SIGHUP."))
        tokenReloadFailures = registry.makeCounter(descriptor: .init(metricName: "herald_api_token_reload_failures", unitName: "total",
                                                                      helpText: "Token-file reloads refused (unreadable or no token); the previous tokens stay."))
        inFlight = registry.makeGauge(descriptor: .init(metricName: "herald_api_requests_in_flight", unitName: "",
                                                        helpText: "Requests being served."))
    }

    func record(route: String, method: String, status: Int, duration: Duration) {
        let key = "\(route) \(method) \(status)"
        let counter = requests.withLock { table in
            if let counter = table[key] { return counter }
            let counter = registry.makeCounter(
                descriptor: .init(metricName: "herald_api_requests", unitName: "total", helpText: "HTTP requests by route template, method and status."),
                labels: [("route", route), ("method", method), ("status", String(status))])
            table[key] = counter
            return counter
        }
        counter.increment()
        let histogram = durations.withLock { table in
            if let histogram = table[route] { return histogram }
            let histogram = registry.makeDurationHistogram(
                descriptor: .init(metricName: "herald_api_request_duration", unitName: "seconds",
                                  helpText: "Time from a request's head to its response, by route template."),
                labels: [("route", route)], buckets: APIMetrics.buckets)
            table[route] = histogram
            return histogram
        }
        histogram.record(duration)
    }

    func enqueued(_ count: Int, queue: String) {
        let counter = enqueued.withLock { table -> Prometheus.Counter in
            if let counter = table[queue] { return counter }
            let label = table.count < APIMetrics.maxQueueLabels ? queue : "other"
            if let counter = table[label] { return counter }
            let counter = registry.makeCounter(
                descriptor: .init(metricName: "herald_api_notifications_enqueued", unitName: "total",
                                  helpText: "Jobs the API added to a queue's stream (replays not counted)."),
                labels: [("queue", label)])
            table[label] = counter
            return counter
        }
        counter.increment(by: Int64(count))
    }

    /// The exposition text.
    public func render() -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(8 * 1024)
        registry.emit(into: &buffer)
        process.emit(into: &buffer)
        return buffer
    }
}
