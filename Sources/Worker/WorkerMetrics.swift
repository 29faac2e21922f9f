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
/// series carries a `queue` label, and outcomes and latency also the app of the job (its app
/// lane): a worker with several queues and apps publishes one series per queue and app, through
/// handles made once at start (nothing is built per notification). Per-app gauges are
/// `LoopGauge`s, which add this loop's part to the other loops'. Loop-confined.
public final class WorkerMetrics {
    private let metrics: HeraldMetrics
    private let health: HealthState
    private let loopIndex: Int
    private let worker: QueueWorker
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
    /// Each app's series, in lane order, made once at startup.
    private let appSeries: [AppSeries]
    /// Each queue's series, in queue order, made once at startup.
    private let queueSeries: [QueueSeries]
    /// Each app's `herald_last_success_timestamp_seconds`, made at its first success.
    private var lastSuccess: [LoopGauge?]
    /// `herald_token_backoffs`: every loop's backed-off tokens, summed.
    private let tokenBackoffs: LoopGauge

    struct PoolReading {
        var accepted = 0
        var responses: [String: Int] = [:]
        var duration = LatencyHistogram()
        var events = Array(repeating: 0, count: WorkerMetrics.connectionEvents.count)
        var mints = 0
    }

    /// One app's series: made when the worker starts (the apps are known from its configuration),
    /// so the per-second publication only adds to handles, and every series is exposed at 0
    /// before its first event. A series that appears only with its first increment hides that
    /// increment from `rate()` and `increase()`, and leaves panels and alerts without data: an
    /// app that never succeeds would never show an `accepted` series to alert on.
    struct AppSeries {
        let app: String
        let requestDurationLabels: [(String, String)]
        let accepted200: CoreMetrics.Counter
        let events: [CoreMetrics.Counter]
        let mints: CoreMetrics.Counter
        /// Gauges every loop of the worker reports into (summed, or the maximum for a flag or a time).
        let ready: LoopGauge
        let connecting: LoopGauge
        let goingAway: LoopGauge
        let inFlight: LoopGauge
        let queued: LoopGauge
        let slotsFree: LoopGauge
        let credentialsRejected: LoopGauge
        /// `herald_notifications_priority_total{app,priority}` for 10, 5 and 1, in that order.
        let priority: [CoreMetrics.Counter]

        init(app: String, metrics: HeraldMetrics, loops: Int) {
            self.app = app
            let appLabel = [("app", app)]
            requestDurationLabels = appLabel
            accepted200 = metrics.counter("herald_apns_responses_total", appLabel + [("status", "200"), ("reason", "")])
            // The 403 answers the credential alerts watch, at 0 from the start: the first
            // refusal is often the only one before the app halts, and must show in increase().
            for reason in WorkerMetrics.forbiddenReasons {
                _ = metrics.counter("herald_apns_responses_total", appLabel + [("status", "403"), ("reason", reason)])
            }
            events = WorkerMetrics.connectionEvents.map { metrics.counter("herald_connection_events_total", appLabel + [("event", $0)]) }
            mints = metrics.counter("herald_jwt_mints_total", appLabel)
            ready = metrics.loopGauge("herald_connections", appLabel + [("state", "ready")], loops: loops)
            connecting = metrics.loopGauge("herald_connections", appLabel + [("state", "connecting")], loops: loops)
            goingAway = metrics.loopGauge("herald_connections", appLabel + [("state", "going_away")], loops: loops)
            inFlight = metrics.loopGauge("herald_streams_in_flight", appLabel, loops: loops)
            queued = metrics.loopGauge("herald_notifications_queued", appLabel, loops: loops)
            slotsFree = metrics.loopGauge("herald_stream_slots_free", appLabel, loops: loops)
            credentialsRejected = metrics.loopGauge("herald_credentials_rejected", appLabel, loops: loops, combine: .max)
            priority = ["10", "5", "1"].map { metrics.counter("herald_notifications_priority_total", appLabel + [("priority", $0)]) }
        }
    }

    /// One queue's series, made at startup like the apps': its outcome counters and end-to-end
    /// latency per app, and its queue-level counters.
    struct QueueSeries {
        let queue: String
        /// `herald_notifications_total{app,queue,outcome}`: `[lane][outcome]`, outcomes in
        /// `WorkerMetrics.outcomes` order.
        let outcomes: [[CoreMetrics.Counter]]
        /// `herald_end_to_end_latency_seconds`' labels per lane.
        let endToEndLabels: [[(String, String)]]
        /// Dead letters of jobs that belong to none of the worker's apps (`app=""`).
        let unattributedDeadLettered: CoreMetrics.Counter
        let jobsRead: CoreMetrics.Counter
        let jobsReclaimed: CoreMetrics.Counter
        let redisErrors: CoreMetrics.Counter
        let consumersRemoved: CoreMetrics.Counter
        let unknownFields: CoreMetrics.Counter
        let tokenBackoffDeferred: CoreMetrics.Counter
        /// `herald_wrong_environment_total{app,queue}` per lane.
        let wrongEnvironment: [CoreMetrics.Counter]

        init(queue: String, apps: [String], metrics: HeraldMetrics) {
            self.queue = queue
            outcomes = apps.map { app in
                WorkerMetrics.outcomes.map { metrics.counter("herald_notifications_total", [("app", app), ("queue", queue), ("outcome", $0)]) }
            }
            endToEndLabels = apps.map { [("app", $0), ("queue", queue)] }
            unattributedDeadLettered = metrics.counter("herald_notifications_total", [("app", ""), ("queue", queue), ("outcome", "dead_lettered")])
            let q = [("queue", queue)]
            jobsRead = metrics.counter("herald_jobs_read_total", q)
            jobsReclaimed = metrics.counter("herald_jobs_reclaimed_total", q)
            redisErrors = metrics.counter("herald_redis_errors_total", q)
            consumersRemoved = metrics.counter("herald_consumers_removed_total", q)
            unknownFields = metrics.counter("herald_jobs_unknown_fields_total", q)
            tokenBackoffDeferred = metrics.counter("herald_token_backoff_deferred_total", q)
            wrongEnvironment = apps.map { metrics.counter("herald_wrong_environment_total", [("app", $0), ("queue", queue)]) }
        }
    }

    /// Dynamic series (APNs' other answers, dead-letter reasons, the last-success time): made on
    /// first use, once a second at most, and cached.
    private var counterCache: [String: CoreMetrics.Counter] = [:]
    private var gaugeCache: [String: CoreMetrics.Gauge] = [:]

    /// Notification and latency series carry the app that sent them (the job's app lane), so a
    /// worker serving several apps tells them apart.
    public init(metrics: HeraldMetrics, health: HealthState, loopIndex: Int, worker: QueueWorker) {
        self.metrics = metrics
        self.health = health
        self.loopIndex = loopIndex
        self.worker = worker
        let queues = worker.configuration.queues.map(\.queue)
        self.queues = queues
        self.samplesQueue = loopIndex == 0
        lastPools = worker.lanes.map { _ in PoolReading() }
        let apps = worker.lanes.map(\.name)
        appSeries = apps.map { AppSeries(app: $0, metrics: metrics, loops: health.loops) }
        queueSeries = queues.map { QueueSeries(queue: $0, apps: apps, metrics: metrics) }
        lastSuccess = worker.lanes.map { _ in nil }
        tokenBackoffs = metrics.loopGauge("herald_token_backoffs", [], loops: health.loops)
        lastCounters = queues.map { _ in WorkerCounters(apps: apps.count) }
        for series in appSeries {
            metrics.histograms.declare(name: "herald_apns_request_duration_seconds", labels: series.requestDurationLabels,
                                       help: "Time from opening an HTTP/2 stream to APNs' answer.")
        }
        for series in queueSeries {
            for labels in series.endToEndLabels {
                metrics.histograms.declare(name: "herald_end_to_end_latency_seconds", labels: labels,
                                           help: "Time from enqueue (stream entry id) to APNs accepting the notification.")
            }
        }
    }

    /// `herald_notifications_total`'s outcomes, in the order of `QueueSeries.outcomes`.
    static let outcomes = ["accepted", "dead_token", "dead_lettered", "retried", "superseded", "handed_back", "scheduled"]
    static let connectionEvents = ["opened", "failed", "goaway", "reset", "ping_timeout", "response_timeout", "credentials_suspected"]
    /// The reasons APNs documents for status 403.
    static let forbiddenReasons = ["BadCertificate", "BadCertificateEnvironment", "ExpiredProviderToken", "Forbidden",
                                   "InvalidProviderToken", "MissingProviderToken", "UnrelatedKeyIdInToken", "BadEnvironmentKeyIdInToken"]

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

    private static func add(_ counter: CoreMetrics.Counter, _ delta: Int) {
        if delta > 0 { counter.increment(by: Int64(delta)) }
    }

    /// One publication: counter growth, gauges, histograms, health.
    public func publish() {
        let now = EventLoop.monotonicMilliseconds()
        health.beat(loop: loopIndex, now: now)
        health.setReady(loop: loopIndex, worker.isReady)

        let all = worker.queueCounters
        for (index, series) in queueSeries.enumerated() where index < all.count {
            publishCounters(all[index], previous: lastCounters[index], series: series)
        }
        lastCounters = all
        tokenBackoffs.record(worker.rules.tokensBackingOff(now: worker.wallClockNow()), loop: loopIndex)

        for (laneIndex, lane) in worker.lanes.enumerated() {
            publishPool(lane, series: appSeries[laneIndex], queued: worker.rules.queued(lane: laneIndex), last: &lastPools[laneIndex])
            if lane.pool.lastAcceptedAt > 0 {
                // No 0 before the first success: a timestamp of 1970 would read as "55 years ago".
                if lastSuccess[laneIndex] == nil {
                    lastSuccess[laneIndex] = metrics.loopGauge("herald_last_success_timestamp_seconds", [("app", lane.name)],
                                                               loops: health.loops, combine: .max)
                }
                lastSuccess[laneIndex]?.record(Double(lane.pool.lastAcceptedAt) / 1000, loop: loopIndex)
            }
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
    private func publishCounters(_ counters: WorkerCounters, previous: WorkerCounters, series: QueueSeries) {
        for (laneIndex, outcomes) in series.outcomes.enumerated() where laneIndex < counters.apps.count {
            let current = counters.apps[laneIndex]
            let before = laneIndex < previous.apps.count ? previous.apps[laneIndex] : AppOutcomes()
            // In `WorkerMetrics.outcomes` order.
            WorkerMetrics.add(outcomes[0], current.accepted - before.accepted)
            WorkerMetrics.add(outcomes[1], current.deadTokens - before.deadTokens)
            WorkerMetrics.add(outcomes[2], current.deadLettered - before.deadLettered)
            WorkerMetrics.add(outcomes[3], current.retried - before.retried)
            WorkerMetrics.add(outcomes[4], current.superseded - before.superseded)
            WorkerMetrics.add(outcomes[5], current.handedBack - before.handedBack)
            WorkerMetrics.add(outcomes[6], current.scheduled - before.scheduled)
            WorkerMetrics.add(series.wrongEnvironment[laneIndex], current.wrongEnvironment - before.wrongEnvironment)
            if laneIndex < appSeries.count {
                let priority = appSeries[laneIndex].priority
                WorkerMetrics.add(priority[0], current.sentPriority10 - before.sentPriority10)
                WorkerMetrics.add(priority[1], current.sentPriority5 - before.sentPriority5)
                WorkerMetrics.add(priority[2], current.sentPriority1 - before.sentPriority1)
            }
            metrics.histograms.add(current.endToEndLatency.subtracting(before.endToEndLatency),
                                   name: "herald_end_to_end_latency_seconds", labels: series.endToEndLabels[laneIndex])
        }
        WorkerMetrics.add(series.unattributedDeadLettered, counters.unattributedDeadLettered - previous.unattributedDeadLettered)
        WorkerMetrics.add(series.jobsRead, counters.jobsRead - previous.jobsRead)
        WorkerMetrics.add(series.jobsReclaimed, counters.jobsReclaimed - previous.jobsReclaimed)
        WorkerMetrics.add(series.redisErrors, counters.redisErrors - previous.redisErrors)
        WorkerMetrics.add(series.consumersRemoved, counters.consumersRemoved - previous.consumersRemoved)
        WorkerMetrics.add(series.unknownFields, counters.unknownFields - previous.unknownFields)
        WorkerMetrics.add(series.tokenBackoffDeferred, counters.tokenBackoffDeferred - previous.tokenBackoffDeferred)
        let q = [("queue", series.queue)]
        for (reason, count) in counters.deadLetteredByReason where count != previous.deadLetteredByReason[reason] {
            add("herald_jobs_dead_lettered_total", q + [("reason", reason)], count - (previous.deadLetteredByReason[reason] ?? 0))
        }
    }

    private func publishPool(_ lane: AppLane, series: AppSeries, queued: Int, last: inout PoolReading) {
        let pool = lane.pool
        let app = series.app
        WorkerMetrics.add(series.accepted200, pool.acceptedResponses - last.accepted)
        last.accepted = pool.acceptedResponses
        for (key, count) in pool.otherResponses where count != last.responses[key] {
            let parts = key.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
            let status = String(parts[0])
            let reason = parts.count > 1 ? String(parts[1]) : ""
            add("herald_apns_responses_total", [("app", app), ("status", status), ("reason", reason)], count - (last.responses[key] ?? 0))
        }
        last.responses = pool.otherResponses
        metrics.histograms.add(pool.requestDuration.subtracting(last.duration), name: "herald_apns_request_duration_seconds",
                               labels: series.requestDurationLabels)
        last.duration = pool.requestDuration
        let events = [pool.connectionsOpened, pool.connectionFailures, pool.goAwaysReceived, pool.connectionResets, pool.pingTimeouts,
                      pool.responseTimeouts, pool.credentialSuspicions]
        for index in events.indices {
            WorkerMetrics.add(series.events[index], events[index] - last.events[index])
        }
        last.events = events
        let mints = pool.tokens?.mintCount ?? 0
        WorkerMetrics.add(series.mints, mints - last.mints)
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
        series.ready.record(ready, loop: loopIndex)
        series.connecting.record(connecting, loop: loopIndex)
        series.goingAway.record(goingAway, loop: loopIndex)
        series.inFlight.record(pool.inFlight, loop: loopIndex)
        series.queued.record(queued, loop: loopIndex)
        series.slotsFree.record(pool.freeSlots, loop: loopIndex)
        series.credentialsRejected.record(pool.stoppedReason == nil ? 0 : 1, loop: loopIndex)
    }

    /// Samples every queue, each on its own connection; the first queue's answer sets when the
    /// next sampling is due.
    private func sampleQueues() {
        for (index, queue) in queues.enumerated() {
            sampleQueue(index, queue)
            if let urgent = worker.urgentStreamIndex(ofQueue: index) { sampleUrgentLane(urgent, queue) }
        }
    }

    /// The urgent stream's depth, pending entries and lag, under their own names (the bulk
    /// stream keeps `herald_queue_depth` and the others, which dashboards and alerts already read).
    private func sampleUrgentLane(_ index: Int, _ queue: String) {
        worker.sampleQueue(index) { [weak self] sample in
            guard let self, let sample else { return }
            let q = [("queue", queue)]
            self.gauge("herald_urgent_queue_depth", q).record(sample.depth)
            self.gauge("herald_urgent_queue_pending", q).record(sample.pending)
            self.gauge("herald_urgent_consumer_lag", q).record(sample.lag)
        }
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
