import CoreMetrics
import Metrics
import Prometheus
import Synchronization

/// Herald's metrics: counters and gauges through swift-metrics backed by swift-prometheus, and
/// latency histograms that loops fill locally and merge in batches (`SharedHistograms`).
///
/// One per process. `MetricsSystem` can be bootstrapped once; later registries in the same process
/// (tests) still work because handles are made from this registry's factory directly.
public final class HeraldMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    public let factory: PrometheusMetricsFactory
    public let histograms = SharedHistograms()

    private static let bootstrapped = Mutex(false)

    public init() {
        registry = PrometheusCollectorRegistry()
        factory = PrometheusMetricsFactory(registry: registry)
        HeraldMetrics.bootstrapped.withLock { done in
            if !done {
                MetricsSystem.bootstrap(factory)
                done = true
            }
        }
    }

    /// A counter handle, made once and cached by its owner.
    public func counter(_ name: String, _ dimensions: [(String, String)] = []) -> CoreMetrics.Counter {
        CoreMetrics.Counter(label: name, dimensions: dimensions, factory: factory)
    }

    /// A gauge handle, made once and cached by its owner.
    public func gauge(_ name: String, _ dimensions: [(String, String)] = []) -> CoreMetrics.Gauge {
        CoreMetrics.Gauge(label: name, dimensions: dimensions, factory: factory)
    }

    /// The exposition text of every metric.
    public func render() -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 * 1024)
        registry.emit(into: &buffer)
        histograms.emit(into: &buffer)
        return buffer
    }
}
