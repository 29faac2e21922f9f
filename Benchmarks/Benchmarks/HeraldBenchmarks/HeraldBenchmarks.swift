import APNs
import Benchmark
import BenchmarkFixtures
import Glibc
import Queue
@_spi(Benchmarks) import Transport

/// Herald's per-notification hot pieces, each measured for wall clock, mallocs and (where the
/// machine exposes hardware counters) instructions. Every figure is per operation: benchmarks
/// that do many operations per sample say so with their scaling factor. Results and thresholds:
/// `Benchmarks/README.md`, `Benchmarks/Thresholds/`.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: heraldMetrics,
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 1_000,
        thresholds: heraldThresholds)

    // MARK: job decode and validation

    Benchmark("JobDecoder.decode (1 token, 256 B alert)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(JobDecoder.decode(entryID: Fixtures.entryID, fields: Fixtures.jobFields, defaults: Fixtures.jobDefaults))
        }
    }

    Benchmark("Notification.validate (256 B alert)") { benchmark in
        let notification = Fixtures.notification
        for _ in benchmark.scaledIterations {
            blackHole(try? notification.validate())
        }
    }

    Benchmark("Notification.validate (liveactivity start)") { benchmark in
        let notification = Fixtures.liveActivity
        for _ in benchmark.scaledIterations {
            blackHole(try? notification.validate())
        }
    }

    Benchmark("StableID.apnsID") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(StableID.apnsID(origin: Fixtures.origin, token: Fixtures.token))
        }
    }

    // MARK: request headers

    Benchmark("RequestHeaderBuilder.withHeaders (all headers, bearer JWT)") { benchmark in
        let builder = RequestHeaderBuilder(authority: "api.push.apple.com")
        let notification = Fixtures.notification
        let authorization = Fixtures.authorization
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(builder.withHeaders(for: notification, authorization: authorization) { _, count in count })
        }
    }

    // MARK: provider tokens (once per 20-60 minutes per app; measured to show it is off the hot path)

    // OpenSSL's allocations per signature vary between runs (88 to 104 seen), hence the slack.
    Benchmark(
        "ProviderTokenSigner.makeToken (ES256 JWT)",
        configuration: .init(scalingFactor: .one, thresholds: tolerant(mallocPercent: 25))
    ) { benchmark in
        let signer = try ProviderTokenSigner(teamID: "ABCDE12345", keyID: "KEY1234567", key: try ES256PrivateKey.generate())
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(try signer.makeToken(issuedAt: 1_717_171_717))
        }
    }

    // MARK: response classification

    Benchmark("ResponseClassifier.classify (200)") { benchmark in
        let body: [UInt8] = []
        for _ in benchmark.scaledIterations {
            blackHole(body.withUnsafeBytes { ResponseClassifier.classify(status: blackHoleIdentity(200), body: $0) })
        }
    }

    Benchmark("ResponseClassifier.classify (410 Unregistered + timestamp)") { benchmark in
        let body = Fixtures.body410
        for _ in benchmark.scaledIterations {
            blackHole(body.withUnsafeBytes { ResponseClassifier.classify(status: 410, body: $0) })
        }
    }

    Benchmark("ResponseClassifier.classify (400 BadDeviceToken)") { benchmark in
        let body = Fixtures.body400
        for _ in benchmark.scaledIterations {
            blackHole(body.withUnsafeBytes { ResponseClassifier.classify(status: 400, body: $0) })
        }
    }

    Benchmark("APNsErrorBody.parse (unknown reason)") { benchmark in
        let body = Fixtures.bodyUnknown
        for _ in benchmark.scaledIterations {
            blackHole(APNsErrorBody.parse(body))
        }
    }

    // MARK: the whole per-notification path through HTTP/2 (in memory)

    // One op = one notification: submit on APNsConnection (slot, headers, nghttp2 HEADERS + DATA),
    // the responder's nghttp2 server session decoding it and answering, and the connection reading
    // the answer and classifying it. 1000 concurrent streams, as the worker runs.
    Benchmark("APNsConnection round trip in memory (200, 1000 streams)", configuration: .init(thresholds: tolerant(mallocPercent: 1))) { benchmark in
        let pair = try InMemoryPair(status: 200)
        let request = PendingRequest(notification: Fixtures.notification, context: 7)
        pair.send(2_000, request)  // warm: HPACK tables, slot buffers, nghttp2 free lists
        benchmark.startMeasurement()
        pair.send(benchmark.scaledIterations.count, request)
        benchmark.stopMeasurement()
        precondition(pair.other == 0, "\(pair.other) notifications were not accepted")
    }

    Benchmark(
        "APNsConnection round trip in memory (410 Unregistered, 1000 streams)",
        configuration: .init(thresholds: tolerant(mallocPercent: 1))
    ) { benchmark in
        let pair = try InMemoryPair(status: 410, body: #"{"reason":"Unregistered","timestamp":1717171717171}"#)
        let request = PendingRequest(notification: Fixtures.notification, context: 7)
        pair.send(2_000, request)
        benchmark.startMeasurement()
        pair.send(benchmark.scaledIterations.count, request)
        benchmark.stopMeasurement()
        precondition(pair.accepted == 0, "a 410 was classified as accepted")
    }

    // MARK: the worker's whole path, stream entry to acknowledgement (in memory)

    // One op = one notification: its entry decoded and validated by DeliveryRules, sent on the
    // APNsConnection through the in-memory responder, answered, classified, finished, its entry's
    // acknowledgement encoded as the RESP bytes the worker writes (XACK, or MULTI/…/XACK/EXEC), and the
    // batch confirmed. Rounds of 1000 jobs on 1000 streams. The responder (standing in for APNs)
    // allocates from a pooled allocator, so the count is Herald's.
    Benchmark("End to end in memory (1 token per job, 256 B alert)", configuration: .init(thresholds: tolerant(mallocPercent: 1))) { benchmark in
        let pipeline = try EndToEnd(jobs: 1000, tokensPerJob: 1)
        pipeline.run(3 * pipeline.notificationsPerRound)  // warm: HPACK tables, slots, free lists, the rules' tables
        benchmark.startMeasurement()
        blackHole(pipeline.run(benchmark.scaledIterations.count))
        benchmark.stopMeasurement()
        precondition(pipeline.other == 0, "\(pipeline.other) notifications were not accepted")
    }

    Benchmark("End to end in memory (fan-out, 10 tokens per job)", configuration: .init(thresholds: tolerant(mallocPercent: 1))) { benchmark in
        let pipeline = try EndToEnd(jobs: 100, tokensPerJob: 10)
        pipeline.run(3 * pipeline.notificationsPerRound)
        benchmark.startMeasurement()
        blackHole(pipeline.run(benchmark.scaledIterations.count))
        benchmark.stopMeasurement()
        precondition(pipeline.other == 0, "\(pipeline.other) notifications were not accepted")
    }

    Benchmark("End to end in memory (1 token per job, collapse id)", configuration: .init(thresholds: tolerant(mallocPercent: 1))) { benchmark in
        let pipeline = try EndToEnd(jobs: 1000, tokensPerJob: 1, collapseID: true)
        pipeline.run(3 * pipeline.notificationsPerRound)
        benchmark.startMeasurement()
        blackHole(pipeline.run(benchmark.scaledIterations.count))
        benchmark.stopMeasurement()
        precondition(pipeline.other == 0, "\(pipeline.other) notifications were not accepted")
    }
}

/// Wall clock, throughput, mallocs (CPU time is left out: its 10 ms tick is coarser than any op here); instructions only where hardware counters exist (many VMs have none:
/// there package-benchmark would report 0 and a threshold on it would mean nothing).
/// `HERALD_BENCH_INSTRUCTIONS=1` or `=0` overrides the detection.
var heraldMetrics: [BenchmarkMetric] {
    var metrics: [BenchmarkMetric] = [.wallClock, .throughput, .mallocCountTotal, .memoryLeakedBytes]
    if instructionCounterAvailable() { metrics.append(.instructions) }
    return metrics
}

/// Tolerances for `benchmark thresholds check`, which compares a run's p90 with the p90 saved in
/// `Thresholds/`: mallocs are exact in steady state, so one more allocation per op fails;
/// instructions are repeatable; time is noisy on 2 shared cores, so only a large slowdown fails.
var heraldThresholds: [BenchmarkMetric: BenchmarkThresholds] {
    var thresholds: [BenchmarkMetric: BenchmarkThresholds] = [
        .mallocCountTotal: .init(relative: [.p90: 0], absolute: [.p90: 0]),
        .wallClock: .init(relative: [.p90: 50]),
        .throughput: .init(relative: [.p90: 50]),
    ]
    if instructionCounterAvailable() { thresholds[.instructions] = .init(relative: [.p90: 5]) }
    return thresholds
}

/// `heraldThresholds` with room for mallocs made by C libraries whose buffers grow now and then
/// (nghttp2 in the round trip: 1 % still fails on one new allocation per notification).
func tolerant(mallocPercent: Double) -> [BenchmarkMetric: BenchmarkThresholds] {
    var thresholds = heraldThresholds
    thresholds[.mallocCountTotal] = .init(relative: [.p90: mallocPercent])
    return thresholds
}

func instructionCounterAvailable() -> Bool {
    if let forced = getenv("HERALD_BENCH_INSTRUCTIONS") { return String(cString: forced) != "0" }
    // A hardware PMU registers an event source with an `instructions` event ("cpu" on x86,
    // "armv8_pmuv3*" on ARM); a VM without one has only software and tracepoint sources.
    guard let directory = opendir("/sys/bus/event_source/devices") else { return false }
    defer { closedir(directory) }
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name.hasPrefix(".") { continue }
        if access("/sys/bus/event_source/devices/\(name)/events/instructions", F_OK) == 0 { return true }
    }
    return false
}

@inline(never)
func blackHoleIdentity<T>(_ value: T) -> T { value }
