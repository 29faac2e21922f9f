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
    public let factory: HelpingMetricsFactory
    public let histograms = SharedHistograms()
    /// The standard `process_*` metrics, read from /proc at each scrape.
    public let process = ProcessMetrics()

    private static let bootstrapped = Mutex(false)

    public init() {
        registry = PrometheusCollectorRegistry()
        factory = HelpingMetricsFactory(registry: registry)
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

    private let loopGauges = Mutex<[String: LoopGauge]>([:])

    /// The gauge `name{dimensions}` that `loops` event loops report into, each its own part; every
    /// caller with the same name and dimensions gets the same one.
    public func loopGauge(_ name: String, _ dimensions: [(String, String)], loops: Int, combine: LoopGauge.Combine = .sum) -> LoopGauge {
        let key = name + "{" + PrometheusText.labels(dimensions) + "}"
        return loopGauges.withLock { gauges in
            if let existing = gauges[key] { return existing }
            let made = LoopGauge(gauge: gauge(name, dimensions), loops: loops, combine: combine)
            gauges[key] = made
            return made
        }
    }

    /// The exposition text of every metric.
    public func render() -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 * 1024)
        registry.emit(into: &buffer)
        histograms.emit(into: &buffer)
        process.emit(into: &buffer)
        return buffer
    }
}

/// swift-prometheus' factory, with each counter's and gauge's `# HELP` line from `MetricHelp`:
/// the factory it wraps registers every series with an empty help text.
public struct HelpingMetricsFactory: CoreMetrics.MetricsFactory {
    let registry: PrometheusCollectorRegistry
    let inner: PrometheusMetricsFactory

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        inner = PrometheusMetricsFactory(registry: registry)
    }

    /// The name as it is, with its help text (no unit suffix added: Herald's names carry theirs).
    private func descriptor(_ name: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: MetricHelp.text[name] ?? "")
    }

    public func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    public func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard !aggregate else { return inner.makeRecorder(label: label, dimensions: dimensions, aggregate: aggregate) }
        return registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    public func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    public func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        inner.makeTimer(label: label, dimensions: dimensions)
    }

    public func destroyCounter(_ handler: any CounterHandler) { inner.destroyCounter(handler) }
    public func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) { inner.destroyFloatingPointCounter(handler) }
    public func destroyRecorder(_ handler: any RecorderHandler) { inner.destroyRecorder(handler) }
    public func destroyMeter(_ handler: any MeterHandler) { inner.destroyMeter(handler) }
    public func destroyTimer(_ handler: any TimerHandler) { inner.destroyTimer(handler) }
}
