import CoreMetrics

extension MetricsHTTPServer {
    /// Publishes the server's own `Statistics` as metrics, just before each /metrics answer:
    /// descriptor exhaustion seen by the listener and connections shed show up where operators
    /// look. Owned by the server's loop.
    public final class Publisher {
        private let acceptCalls: CoreMetrics.Counter
        private let outOfDescriptors: CoreMetrics.Counter
        private let shed: CoreMetrics.Counter
        private let timedOut: CoreMetrics.Counter
        private let open: CoreMetrics.Gauge
        private var published = Statistics()

        public init(metrics: HeraldMetrics) {
            acceptCalls = metrics.counter("herald_metrics_http_accept_calls_total")
            outOfDescriptors = metrics.counter("herald_metrics_http_accept_out_of_descriptors_total")
            shed = metrics.counter("herald_metrics_http_connections_shed_total")
            timedOut = metrics.counter("herald_metrics_http_connections_timed_out_total")
            open = metrics.gauge("herald_metrics_http_open_connections")
        }

        public func publish(_ statistics: Statistics) {
            acceptCalls.increment(by: Int64(max(0, statistics.acceptCalls - published.acceptCalls)))
            outOfDescriptors.increment(by: Int64(max(0, statistics.acceptOutOfDescriptors - published.acceptOutOfDescriptors)))
            shed.increment(by: Int64(max(0, statistics.shedConnections - published.shedConnections)))
            timedOut.increment(by: Int64(max(0, statistics.timedOutConnections - published.timedOutConnections)))
            open.record(statistics.openConnections)
            published = statistics
        }
    }
}
