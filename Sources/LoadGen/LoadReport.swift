import APNs
import Observability

/// What one load run measured, with its conditions: counts of every outcome (and of what was
/// lost or duplicated), time and rate, latency percentiles, worker CPU and memory. `LoadRun`
/// fills it; `herald loadgen` prints `text()` and writes `json()` and the plot.
public struct LoadReport: Sendable {
    public var jobs = 0
    public var notifications = 0
    public var accepted = 0
    public var deadLettered = 0
    public var deadTokens = 0
    public var superseded = 0
    /// Whether superseded counts were read from every worker (attached workers without --worker-metrics: no).
    public var supersededKnown = true
    public var duplicated = 0
    /// Answers other than 200 the emulator gave (each ends as a dead token, a dead letter or a retry).
    public var rejectedByAPNs = 0
    public var wallSeconds = 0.0
    public var enqueueSeconds = 0.0
    /// Steady mode: the furthest the producer fell behind its schedule (counted in
    /// `latencyFromSchedule`, not in `latency`), ms.
    public var producerMaxBehindMilliseconds: Double? = nil
    /// From each job's XADD to its answer.
    public var latency: LatencyPercentiles? = nil
    /// Steady mode: from when each job was due by the producer's schedule to its answer, so a
    /// producer that fell behind (a stalled machine stalls it too) shows here.
    public var latencyFromSchedule: LatencyPercentiles? = nil
    /// utime + stime of the workers this run started; nil when it measured attached workers.
    public var workerCPUSeconds: Double? = nil
    public var peakWorkerHWMBytes: Int? = nil
    public var maxWorkerRSSBytes: Int? = nil
    /// CPU seconds of the other processes on the machine's cores during the run (redis-server and
    /// the emulator when started here, and loadgen itself): where the rest of the CPU went.
    public var otherCPUSeconds: [(name: String, seconds: Double)] = []
    /// Seconds the workers (summed) and each other process were runnable but not running during
    /// the run: a machine whose processes wait for its cores shows it here, whatever the CPU
    /// seconds say. Nil and empty when the kernel keeps no schedstat.
    public var workerCPUWaitSeconds: Double? = nil
    public var otherCPUWaitSeconds: [(name: String, seconds: Double)] = []
    /// The run's latency per window of time (steady mode, or `--timeline`), and the wall-clock
    /// start of the run's clock (µs since the epoch) its offsets count from.
    public var timeline: LatencySeries? = nil
    public var timelineOriginMicros: Int64 = 0
    public var timedOut = false
    /// Priority-lane runs: the backlog's jobs (within `jobs`), and the rate at which notifications
    /// other than the measured ones were accepted while the measured jobs were being enqueued.
    public var backlog = 0
    public var backlogRatePerSecond: Double? = nil
    /// Backlog jobs still in the bulk stream when the last measured job was enqueued.
    public var backlogLeftAtEnd: Int? = nil
    /// Per queue (a run with `--shards`): jobs enqueued to it, notifications, and when it was
    /// empty (seconds after the clock started; nil if it never was before the end).
    public var queues: [QueueRow] = []

    public struct QueueRow: Sendable {
        public var name: String
        public var jobs: Int
        public var notifications: Int
        public var emptyAfterSeconds: Double?

        public init(name: String, jobs: Int, notifications: Int, emptyAfterSeconds: Double?) {
            self.name = name
            self.jobs = jobs
            self.notifications = notifications
            self.emptyAfterSeconds = emptyAfterSeconds
        }

        /// Its notifications over the time until it was empty.
        public var notificationsPerSecond: Double? {
            guard let seconds = emptyAfterSeconds, seconds > 0 else { return nil }
            return Double(notifications) / seconds
        }
    }
    public var conditions = RunConditions()

    public init() {}

    /// Notifications with no outcome at all: must be 0.
    public var lost: Int { notifications - accepted - deadLettered - deadTokens - superseded }
    public var notificationsPerSecond: Double { wallSeconds > 0 ? Double(notifications - lost) / wallSeconds : 0 }
    public var cpuSecondsPer100k: Double? {
        workerCPUSeconds.map { notifications > 0 ? $0 / Double(notifications) * 100_000 : 0 }
    }
    /// Every notification has exactly one outcome and nothing was delivered twice.
    public var isClean: Bool { lost == 0 && duplicated == 0 && !timedOut }

    // MARK: text

    public func text() -> String {
        let g = PercentText.grouped
        var lines: [String] = []
        lines.append("Herald loadgen: \(conditions.mode)")
        lines.append("  jobs / notifications   \(g(jobs)) / \(g(notifications))")
        lines.append("  accepted               \(g(accepted))")
        lines.append("  dead-lettered          \(g(deadLettered))")
        lines.append("  dead tokens            \(g(deadTokens))")
        lines.append("  superseded             \(g(superseded))\(supersededKnown ? "" : " (workers' /metrics not given: not counted)")")
        lines.append("  lost                   \(g(lost))\(lost == 0 ? "" : "  <-- every notification must have an outcome")")
        lines.append("  duplicated             \(g(duplicated))\(duplicated == 0 ? "" : "  <-- APNs got an apns-id twice")")
        if rejectedByAPNs > 0 { lines.append("  APNs answers not 200   \(g(rejectedByAPNs)) (retried or final, counted above)") }
        lines.append("  wall time              \(PercentText.fixed(wallSeconds, digits: 2)) s\(timedOut ? " (TIMED OUT)" : "")  (enqueue \(PercentText.fixed(enqueueSeconds, digits: 2)) s)")
        lines.append("  throughput             \(g(Int(notificationsPerSecond.rounded()))) notifications/s")
        if queues.count > 1 {
            lines.append("  per queue (notifications, empty after, rate until then)")
            for queue in queues {
                let empty = queue.emptyAfterSeconds.map { PercentText.fixed($0, digits: 2) + " s" } ?? "never"
                let rate = queue.notificationsPerSecond.map { g(Int($0.rounded())) + "/s" } ?? "-"
                lines.append("    \(queue.name)" + String(repeating: " ", count: max(1, 20 - queue.name.count)) + "\(g(queue.notifications))  \(empty)  \(rate)")
            }
            lines.append("    total" + String(repeating: " ", count: 15) + "\(g(notifications))  \(PercentText.fixed(wallSeconds, digits: 2)) s  \(g(Int(notificationsPerSecond.rounded())))/s")
        }
        if let latency {
            let ms = { (value: Double) in PercentText.trimmed(value, digits: 3) }
            func summary(_ latency: LatencyPercentiles) -> String {
                "    p50 \(ms(latency.p50))  p90 \(ms(latency.p90))  p99 \(ms(latency.p99))  p99.9 \(ms(latency.p999))  max \(ms(latency.max))"
            }
            lines.append("  latency (enqueue → APNs answer, ms, n=\(g(latency.count)))")
            lines.append(summary(latency))
            if let scheduled = latencyFromSchedule {
                lines.append("  latency from the schedule (due → APNs answer, the producer's lateness included, ms, n=\(g(scheduled.count)))")
                lines.append(summary(scheduled))
            }
        } else {
            lines.append("  latency                not measured (the emulator was not started with --measure-latency)")
        }
        if let timeline {
            lines.append("  latency over time      " + timelineSummary(timeline))
        }
        if backlog > 0 {
            lines.append("  backlog                \(g(backlog)) bulk jobs enqueued before the workers started (not in the latency)")
            if let rate = backlogRatePerSecond {
                lines.append("  backlog drain          \(g(Int(rate.rounded()))) notifications/s while the measured jobs arrived; \(g(backlogLeftAtEnd ?? 0)) left in the bulk stream after the last")
            }
        }
        if let behind = producerMaxBehindMilliseconds {
            lines.append("  producer behind        \(PercentText.trimmed(behind, digits: 1)) ms at most (in the latency from the schedule only)")
        }
        if let cpu = workerCPUSeconds, let per100k = cpuSecondsPer100k {
            lines.append("  worker CPU             \(PercentText.fixed(per100k, digits: 2)) s per 100k notifications (user+sys, \(PercentText.fixed(cpu, digits: 2)) s in all)")
        }
        if let hwm = peakWorkerHWMBytes, let rss = maxWorkerRSSBytes {
            lines.append("  peak worker RSS        \(mebibytes(hwm)) MiB (VmHWM); largest VmRSS sample \(mebibytes(rss)) MiB")
        }
        if !otherCPUSeconds.isEmpty {
            let parts = otherCPUSeconds.map { "\($0.name) \(PercentText.fixed($0.seconds, digits: 2)) s" }
            lines.append("  other CPU (user+sys)   " + parts.joined(separator: ", ") + " during the run")
        }
        let waits = (workerCPUWaitSeconds.map { [("worker", $0)] } ?? []) + otherCPUWaitSeconds
        if !waits.isEmpty {
            let parts = waits.map { "\($0.0) \(PercentText.fixed($0.1, digits: 2)) s" }
            lines.append("  waiting for a CPU      " + parts.joined(separator: ", ") + " (runnable, not running: schedstat)")
        }
        lines.append("conditions")
        for (name, value) in conditions.lines {
            lines.append("  " + name + String(repeating: " ", count: max(1, 23 - name.count)) + value)
        }
        return lines.joined(separator: "\n")
    }

    func mebibytes(_ bytes: Int) -> String { PercentText.fixed(Double(bytes) / 1_048_576, digits: 1) }

    // MARK: JSON

    public func json() -> String {
        var outcomes = JSONObjectText()
        outcomes.add("accepted", accepted)
        outcomes.add("dead_lettered", deadLettered)
        outcomes.add("dead_tokens", deadTokens)
        outcomes.add("superseded", superseded)
        outcomes.add("superseded_known", supersededKnown)
        outcomes.add("lost", lost)
        outcomes.add("duplicated", duplicated)
        outcomes.add("apns_rejections", rejectedByAPNs)

        var root = JSONObjectText()
        root.add("jobs", jobs)
        root.add("notifications", notifications)
        root.addRaw("outcomes", outcomes.text)
        root.add("wall_seconds", wallSeconds)
        root.add("enqueue_seconds", enqueueSeconds)
        root.add("notifications_per_second", notificationsPerSecond)
        root.add("timed_out", timedOut)
        if !queues.isEmpty {
            root.addRaw("queues", "[" + queues.map { queue -> String in
                var object = JSONObjectText()
                object.add("queue", queue.name)
                object.add("jobs", queue.jobs)
                object.add("notifications", queue.notifications)
                object.add("empty_after_seconds", queue.emptyAfterSeconds)
                object.add("notifications_per_second", queue.notificationsPerSecond)
                return object.text
            }.joined(separator: ",") + "]")
        }
        func latencyObject(_ latency: LatencyPercentiles?) -> String {
            guard let latency else { return "null" }
            var object = JSONObjectText()
            object.add("count", latency.count)
            object.add("p50_ms", latency.p50)
            object.add("p90_ms", latency.p90)
            object.add("p99_ms", latency.p99)
            object.add("p99_9_ms", latency.p999)
            object.add("max_ms", latency.max)
            object.addRaw("curve", "[" + latency.curve.map { "[\(JSONObjectText.number($0.percentile)),\(JSONObjectText.number($0.milliseconds))]" }.joined(separator: ",") + "]")
            return object.text
        }
        root.addRaw("latency", latencyObject(latency))
        root.addRaw("latency_from_schedule", latencyObject(latencyFromSchedule))
        root.addRaw("timeline", timeline.map(timelineObject) ?? "null")
        root.add("producer_max_behind_ms", producerMaxBehindMilliseconds)
        var workers = JSONObjectText()
        workers.add("cpu_seconds", workerCPUSeconds)
        workers.add("cpu_seconds_per_100k_notifications", cpuSecondsPer100k)
        workers.add("cpu_wait_seconds", workerCPUWaitSeconds)
        workers.add("peak_vmhwm_bytes", peakWorkerHWMBytes)
        workers.add("max_vmrss_bytes", maxWorkerRSSBytes)
        root.addRaw("workers", workers.text)
        var others = JSONObjectText()
        for (name, seconds) in otherCPUSeconds { others.add(name.replacingDashes + "_cpu_seconds", seconds) }
        for (name, seconds) in otherCPUWaitSeconds { others.add(name.replacingDashes + "_cpu_wait_seconds", seconds) }
        root.addRaw("other_processes", others.text)
        var conditionsObject = JSONObjectText()
        let c = conditions
        conditionsObject.add("date", c.date)
        conditionsObject.add("cores", c.cores)
        conditionsObject.add("cpu_model", c.cpuModel)
        conditionsObject.add("kernel", c.kernel)
        conditionsObject.add("load_average_start", c.loadAverageAtStart)
        conditionsObject.add("load_average_end", c.loadAverageAtEnd)
        conditionsObject.add("mode", c.mode)
        conditionsObject.add("workers", c.workers)
        conditionsObject.add("threads", c.threads)
        conditionsObject.add("connections", c.connections)
        conditionsObject.add("max_streams", c.maxStreams)
        conditionsObject.add("batch", c.batch)
        conditionsObject.add("results", c.results)
        conditionsObject.add("payload_bytes", c.payloadBytes)
        conditionsObject.add("tokens", c.tokens)
        conditionsObject.add("fanout", c.fanout)
        conditionsObject.add("collapse_ratio", c.collapseRatio)
        conditionsObject.add("push_types", c.pushTypes)
        conditionsObject.add("emulator_latency_ms", c.emulatorLatencyMilliseconds)
        conditionsObject.add("faults", c.faults)
        conditionsObject.add("emulator", c.emulator)
        conditionsObject.add("redis", c.redis)
        conditionsObject.add("herald_version", c.heraldVersion)
        conditionsObject.add("swift_version", c.swiftVersion)
        conditionsObject.add("git_commit", c.gitCommit)
        root.addRaw("conditions", conditionsObject.text)
        return root.text
    }
}

extension LoadReport {
    /// How many stretches of slow answers the summary names.
    static let stretchesShown = 3

    /// One line: the windows, how many had answers over the threshold, and the worst stretches
    /// (seconds from the run's start, answers over, the largest latency).
    func timelineSummary(_ timeline: LatencySeries) -> String {
        let g = PercentText.grouped
        let ms = { (micros: Int64) in PercentText.trimmed(Double(micros) / 1000, digits: 1) }
        let seconds = { (micros: Int64) in PercentText.fixed(Double(micros - self.timelineOriginMicros) / 1e6, digits: 2) }
        var text = "\(g(timeline.windows.count)) windows of \(ms(timeline.windowMicros)) ms, \(g(timeline.windowsWithOver)) with answers over "
            + "\(ms(timeline.overMicros)) ms (\(g(timeline.over)) answers)"
        let stretches = timeline.stretches.prefix(LoadReport.stretchesShown)
        if !stretches.isEmpty {
            text += "; worst: " + stretches.map {
                "\(seconds($0.startMicros))–\(seconds($0.endMicros)) s \(g($0.over)) over, up to \(ms($0.maxMicros)) ms"
            }.joined(separator: " · ")
        }
        if timeline.windowsDropped > 0 { text += "; \(g(Int(timeline.windowsDropped))) earlier windows no longer held" }
        return text
    }

    func timelineObject(_ timeline: LatencySeries) -> String {
        var object = JSONObjectText()
        object.add("window_ms", Double(timeline.windowMicros) / 1000)
        object.add("over_ms", Double(timeline.overMicros) / 1000)
        object.add("windows", timeline.windows.count)
        object.add("windows_with_over", timeline.windowsWithOver)
        object.add("answers_over", timeline.over)
        let stretches = timeline.stretches.prefix(LoadReport.stretchesShown).map { stretch -> String in
            var item = JSONObjectText()
            item.add("start_s", Double(stretch.startMicros - timelineOriginMicros) / 1e6)
            item.add("end_s", Double(stretch.endMicros - timelineOriginMicros) / 1e6)
            item.add("over", stretch.over)
            item.add("max_ms", Double(stretch.maxMicros) / 1000)
            return item.text
        }
        object.addRaw("worst_stretches", "[" + stretches.joined(separator: ",") + "]")
        return object.text
    }
}

/// Builds one JSON object's text, member by member, in the order added.
struct JSONObjectText {
    private var members: [String] = []

    var text: String { "{" + members.joined(separator: ",") + "}" }

    mutating func addRaw(_ name: String, _ json: String) { members.append(JSONObjectText.string(name) + ":" + json) }
    mutating func add(_ name: String, _ value: Int) { addRaw(name, String(value)) }
    mutating func add(_ name: String, _ value: Bool) { addRaw(name, value ? "true" : "false") }
    mutating func add(_ name: String, _ value: Double) { addRaw(name, JSONObjectText.number(value)) }
    mutating func add(_ name: String, _ value: String) { addRaw(name, JSONObjectText.string(value)) }
    mutating func add(_ name: String, _ value: Int?) { addRaw(name, value.map(String.init) ?? "null") }
    mutating func add(_ name: String, _ value: Double?) { addRaw(name, value.map(JSONObjectText.number) ?? "null") }

    static func number(_ value: Double) -> String {
        value.isFinite ? PercentText.trimmed(value, digits: 6) : "null"
    }

    static func string(_ text: String) -> String { LineLogHandler.jsonString(text) }
}

extension String {
    var replacingDashes: String { String(map { $0 == "-" ? "_" : $0 }) }
}
