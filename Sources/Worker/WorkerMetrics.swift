import CoreMetrics
import Logging
import Observability
import Queue
import Transport

/// Publishes one worker loop's counts to the process's metrics about once a second.
///
/// The hot path only bumps plain integers and a local histogram on its loop; this publisher turns
/// their growth since the last second into swift-metrics counter increments, sets gauges, merges
/// histograms into the shared ones, stamps the loop's heartbeat and readiness, and (on loop 0)
/// samples each queue's depth, pending entries, lag and the other streams. Every queue-level
/// series carries a `queue` label; a worker with several queues publishes one series per queue,
/// their label sets made once at start (nothing is built per notification). Loop-confined.
public final class WorkerMetrics {
    private let metrics: HeraldMetrics
    private let health: HealthState
    private let loopIndex: Int
    private let worker: QueueWorker
    private let app: String
    /// The worker's queues, in its order (the rules' queue indices).
    private let queues: [String]
    private let samplesQueue: Bool
    private var timer: EventLoop.TimerID?
    private var tick = 0
    /// The publication that samples the queue next (loop 0 only).
    private var nextSampleTick = 1
    static let sampleEveryTicks = 5

    /// Per queue, the counts at the last publication.
    private var lastCounters: [WorkerCounters]
    /// What each app's pool had reported at the last publication.
    private var lastPools: [PoolReading]

    struct PoolReading {
        var accepted = 0
        var responses: [String: Int] = [:]
        var duration = LatencyHistogram()
        var events = Array(repeating: 0, count: WorkerMetrics.connectionEvents.count)
        var mints = 0
    }

    private var counterCache: [String: CoreMetrics.Counter] = [:]
    private var gaugeCache: [String: CoreMetrics.Gauge] = [:]

    /// `app` labels the worker-wide outcome counters: the app's name in a single-app worker, `all`
    /// when one worker serves several (per-app answers are in herald_apns_responses_total).
    public init(metrics: HeraldMetrics, health: HealthState, loopIndex: Int, worker: QueueWorker) {
        self.metrics = metrics
        self.health = health
        self.loopIndex = loopIndex
        self.worker = worker
        self.app = worker.lanes.count == 1 ? worker.lanes[0].name : "all"
        self.queues = worker.configuration.queues.map(\.queue)
        self.samplesQueue = loopIndex == 0
        lastCounters = queues.map { _ in WorkerCounters() }
        lastPools = worker.lanes.map { _ in PoolReading() }
        for lane in worker.lanes {
            metrics.histograms.declare(name: "herald_apns_request_duration_seconds", labels: [("app", lane.name)],
                                       help: "Time from opening an HTTP/2 stream to APNs' answer.")
        }
        for queue in queues {
            metrics.histograms.declare(name: "herald_end_to_end_latency_seconds", labels: [("app", app), ("queue", queue)],
                                       help: "Time from enqueue (stream entry id) to APNs accepting the notification.")
        }
        declareCounters()
    }

    /// Makes every counter with a fixed label set now, so it is exposed at 0 before its first
    /// event: a series that appears only with its first increment hides that increment from
    /// `rate()` and `increase()`, and leaves the dashboard's panels and alerts without data.
    private func declareCounters() {
        for queue in queues {
            let outcome = [("app", app), ("queue", queue)]
            for name in WorkerMetrics.outcomes { _ = counter("herald_notifications_total", outcome + [("outcome", name)]) }
            let q = [("queue", queue)]
            for name in ["herald_jobs_read_total", "herald_jobs_reclaimed_total", "herald_jobs_superseded_total",
                         "herald_jobs_retried_total", "herald_redis_errors_total", "herald_consumers_removed_total"] {
                _ = counter(name, q)
            }
        }
        for lane in worker.lanes {
            for event in WorkerMetrics.connectionEvents { _ = counter("herald_connection_events_total", [("app", lane.name), ("event", event)]) }
            _ = counter("herald_jwt_mints_total", [("app", lane.name)])
        }
    }

    static let outcomes = ["accepted", "dead_token", "dead_lettered", "retried", "superseded", "handed_back"]
    static let connectionEvents = ["opened", "failed", "goaway", "reset", "ping_timeout", "response_timeout", "credentials_suspected"]

    /// Starts publishing every `intervalMilliseconds` on the worker's loop.
    public func start(intervalMilliseconds: Int64 = 1_000) {
        publish()
        timer = worker.loop.schedule(afterMilliseconds: intervalMilliseconds) { [weak self] in
            self?.start(intervalMilliseconds: intervalMilliseconds)
        }
    }

    public func stop() {
        if let timer { worker.loop.cancel(timer) }
        publish()
        health.setReady(loop: loopIndex, false)
    }

    private func counter(_ name: String, _ labels: [(String, String)]) -> CoreMetrics.Counter {
        let key = name + PrometheusText.labels(labels)
        if let cached = counterCache[key] { return cached }
        let made = metrics.counter(name, labels)
        counterCache[key] = made
        return made
    }

    private func gauge(_ name: String, _ labels: [(String, String)]) -> CoreMetrics.Gauge {
        let key = name + PrometheusText.labels(labels)
        if let cached = gaugeCache[key] { return cached }
        let made = metrics.gauge(name, labels)
        gaugeCache[key] = made
        return made
    }

    private func add(_ name: String, _ labels: [(String, String)], _ delta: Int) {
        if delta > 0 { counter(name, labels).increment(by: Int64(delta)) }
    }

    /// One publication: counter growth, gauges, histograms, health.
    public func publish() {
        let now = EventLoop.monotonicMilliseconds()
        health.beat(loop: loopIndex, now: now)
        health.setReady(loop: loopIndex, worker.isReady)

        let all = worker.queueCounters
        for (index, queue) in queues.enumerated() {
            publishCounters(all[index], previous: lastCounters[index], queue: queue)
        }
        lastCounters = all

        for (laneIndex, lane) in worker.lanes.enumerated() {
            publishPool(lane, last: &lastPools[laneIndex])
        }

        tick += 1
        if samplesQueue && tick >= nextSampleTick {
            // Until Redis answers (the worker is starting or Redis is down) the next second tries
            // again; then every fifth. Waiting five ticks after a refused first try left the queue
            // gauges absent for the worker's first five seconds.
            nextSampleTick = tick + 1
            sampleQueues()
        }
    }

    /// One queue's counter growth since the last publication.
    private func publishCounters(_ counters: WorkerCounters, previous: WorkerCounters, queue: String) {
        let outcome = [("app", app), ("queue", queue)]
        add("herald_notifications_total", outcome + [("outcome", "accepted")], counters.accepted - previous.accepted)
        add("herald_notifications_total", outcome + [("outcome", "dead_token")], counters.deadTokens - previous.deadTokens)
        add("herald_notifications_total", outcome + [("outcome", "dead_lettered")], counters.deadLettered - previous.deadLettered)
        add("herald_notifications_total", outcome + [("outcome", "retried")], counters.retried - previous.retried)
        add("herald_notifications_total", outcome + [("outcome", "superseded")], counters.superseded - previous.superseded)
        add("herald_notifications_total", outcome + [("outcome", "handed_back")], counters.handedBack - previous.handedBack)
        let q = [("queue", queue)]
        add("herald_jobs_read_total", q, counters.jobsRead - previous.jobsRead)
        add("herald_jobs_reclaimed_total", q, counters.jobsReclaimed - previous.jobsReclaimed)
        add("herald_jobs_superseded_total", q, counters.superseded - previous.superseded)
        add("herald_jobs_retried_total", q, counters.retried - previous.retried)
        add("herald_redis_errors_total", q, counters.redisErrors - previous.redisErrors)
        add("herald_consumers_removed_total", q, counters.consumersRemoved - previous.consumersRemoved)
        add("herald_jobs_unknown_fields_total", q, counters.unknownFields - previous.unknownFields)
        for (reason, count) in counters.deadLetteredByReason {
            add("herald_jobs_dead_lettered_total", q + [("reason", reason)], count - (previous.deadLetteredByReason[reason] ?? 0))
        }
        metrics.histograms.add(counters.endToEndLatency.subtracting(previous.endToEndLatency),
                               name: "herald_end_to_end_latency_seconds", labels: outcome)
    }

    private func publishPool(_ lane: AppLane, last: inout PoolReading) {
        let pool = lane.pool
        let app = lane.name
        add("herald_apns_responses_total", [("app", app), ("status", "200"), ("reason", "")], pool.acceptedResponses - last.accepted)
        last.accepted = pool.acceptedResponses
        for (key, count) in pool.otherResponses {
            let parts = key.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
            let status = String(parts[0])
            let reason = parts.count > 1 ? String(parts[1]) : ""
            add("herald_apns_responses_total", [("app", app), ("status", status), ("reason", reason)], count - (last.responses[key] ?? 0))
        }
        last.responses = pool.otherResponses
        metrics.histograms.add(pool.requestDuration.subtracting(last.duration), name: "herald_apns_request_duration_seconds", labels: [("app", app)])
        last.duration = pool.requestDuration
        let events = [pool.connectionsOpened, pool.connectionFailures, pool.goAwaysReceived, pool.connectionResets, pool.pingTimeouts,
                      pool.responseTimeouts, pool.credentialSuspicions]
        for (index, name) in WorkerMetrics.connectionEvents.enumerated() {
            add("herald_connection_events_total", [("app", app), ("event", name)], events[index] - last.events[index])
        }
        last.events = events
        let mints = pool.tokens?.mintCount ?? 0
        add("herald_jwt_mints_total", [("app", app)], mints - last.mints)
        last.mints = mints

        var ready = 0, connecting = 0, goingAway = 0
        for connection in pool.connections {
            switch connection.state {
            case .ready: ready += 1
            case .idle, .connecting: connecting += 1
            case .goingAway: goingAway += 1
            case .closed: break
            }
        }
        let appLabel = [("app", app)]
        gauge("herald_connections", appLabel + [("state", "ready")]).record(ready)
        gauge("herald_connections", appLabel + [("state", "connecting")]).record(connecting)
        gauge("herald_connections", appLabel + [("state", "going_away")]).record(goingAway)
        gauge("herald_streams_in_flight", appLabel).record(pool.inFlight)
        gauge("herald_stream_slots_free", appLabel).record(pool.freeSlots)
        gauge("herald_credentials_rejected", appLabel).record(pool.stoppedReason == nil ? 0 : 1)
        if pool.lastAcceptedAt > 0 {
            gauge("herald_last_success_timestamp_seconds", appLabel).record(Double(pool.lastAcceptedAt) / 1000)
        }
    }

    /// Samples every queue, each on its own connection; the first queue's answer sets when the
    /// next sampling is due.
    private func sampleQueues() {
        for (index, queue) in queues.enumerated() { sampleQueue(index, queue) }
    }

    private func sampleQueue(_ index: Int, _ queue: String) {
        worker.sampleQueue(index) { [weak self] sample in
            guard let self, let sample else { return }
            if index == 0 { self.nextSampleTick = self.tick + WorkerMetrics.sampleEveryTicks }
            let q = [("queue", queue)]
            self.gauge("herald_queue_depth", q).record(sample.depth)
            self.gauge("herald_queue_pending", q).record(sample.pending)
            self.gauge("herald_consumer_lag", q).record(sample.lag)
            self.gauge("herald_retry_set_size", q).record(sample.retrySetSize)
            self.gauge("herald_dead_letter_stream_length", q).record(sample.deadLetters)
            self.gauge("herald_feedback_stream_length", q).record(sample.feedback)
        }
    }
}

/// One reading of a queue's Redis state.
public struct QueueSample: Sendable, Equatable {
    public var depth = 0
    public var pending = 0
    public var lag = 0
    public var retrySetSize = 0
    public var deadLetters = 0
    public var feedback = 0
}
