import APNs
import Foundation
@testable import LoadGen
@testable import MockAPNs
import Queue
import Synchronization
import Testing
import Transport

/// The load generator's arithmetic, without processes: payload sizes, job shapes, percentiles,
/// the plot's scale, and the parsers of /proc, Prometheus text and the emulator's stats.
@Suite struct LoadGenUnitTests {
    @Test(arguments: [PushType.alert, .background, .voip])
    func payloadsHaveExactlyTheRequestedSizeAndAreValidJSON(type: PushType) throws {
        let stamp: Int64 = 1_763_830_000_123_456
        for size in [PayloadFactory.minimumBytes(for: type), 100, 256, 1000, 4096] {
            let payload = PayloadFactory.payload(type: type, stampMicros: stamp, bytes: size)
            #expect(payload.count == size, "\(type) payload of \(size) bytes")
            try payload.withUnsafeBufferPointer { bytes in
                let scanner = JSONScanner(bytes)
                _ = try scanner.validate()
                let t = try #require(scanner.rootMember("t"))
                #expect(scanner.int64(t) == stamp)
                #expect(scanner.rootMember("aps")?.kind == .object)
            }
            var notification = Notification(deviceToken: String(repeating: "ab", count: 32), topic: "com.example.loadgen",
                                            pushType: type, priority: type == .background ? .powerAware : nil, payload: payload)
            if type == .voip { notification.topic += ".voip" }
            try notification.validate()
        }
    }

    /// The payload is written as bytes; it must be the text the interpolated form spells, for any
    /// stamp an Int64 holds (the backlog's 0, a clock before 1970, the extremes) and any size.
    @Test(arguments: [PushType.alert, .background, .voip, .liveactivity])
    func payloadBytesSpellTheSameTextAsInterpolation(type: PushType) {
        func spelled(_ stamp: Int64, _ scheduled: Int64?, _ bytes: Int) -> [UInt8] {
            let aps = type == .background ? #"{"content-available":1}"# : #"{"alert":"Herald loadgen"}"#
            let schedule = scheduled.map { ",\"s\":\($0)" } ?? ""
            let head = "{\"aps\":\(aps),\"t\":\(stamp)\(schedule),\"pad\":\""
            return Array((head + String(repeating: "x", count: max(0, bytes - head.utf8.count - 2)) + "\"}").utf8)
        }
        let stamps: [Int64] = [0, 1, 9, 10, -1, -10, 1_763_830_000_123_456, .max, .min, .min + 1]
        for stamp in stamps {
            for scheduled in [nil, 0, stamp, -7, Int64.max] as [Int64?] {
                for bytes in [0, 1, 40, 96, 97, 256, 4096] {
                    #expect(PayloadFactory.payload(type: type, stampMicros: stamp, scheduledMicros: scheduled, bytes: bytes)
                            == spelled(stamp, scheduled, bytes), "stamp \(stamp), scheduled \(String(describing: scheduled)), \(bytes) bytes")
                }
            }
        }
    }

    @Test(arguments: [PushType.alert, .background])
    func steadyModePayloadsCarryTheScheduleBesideTheEnqueueStamp(type: PushType) throws {
        let sent: Int64 = 1_763_830_000_123_456
        let due: Int64 = 1_763_830_000_120_000
        for size in [PayloadFactory.minimumBytes(for: type), 256] {
            let payload = PayloadFactory.payload(type: type, stampMicros: sent, scheduledMicros: due, bytes: size)
            #expect(payload.count == size)
            try payload.withUnsafeBufferPointer { bytes in
                let scanner = JSONScanner(bytes)
                _ = try scanner.validate()
                #expect(scanner.rootMember("t").flatMap(scanner.int64) == sent)
                #expect(scanner.rootMember("s").flatMap(scanner.int64) == due)
            }
            // What the emulator reads from it.
            let stamps = MockAPNsServer.stamps(payload)
            #expect(stamps.enqueued == sent && stamps.scheduled == due)
        }
        // A drain's payload has no schedule; the minimum size fits both stamps, so every size a
        // run accepts works in either mode.
        let drain = PayloadFactory.payload(type: type, stampMicros: sent, bytes: PayloadFactory.minimumBytes(for: type))
        #expect(drain.count == PayloadFactory.minimumBytes(for: type))
        #expect(MockAPNsServer.stamps(drain) == (sent, 0))
    }

    @Test func theEmulatorReadsStampsOnlyWhereTheyAreStamps() {
        func stamps(_ json: String) -> (Int64, Int64) { MockAPNsServer.stamps(Array(json.utf8)) }
        #expect(stamps(#"{"aps":{},"t":1763830000123,"s":1763830000000}"#) == (1_763_830_000_123_000, 1_763_830_000_000_000))
        // No "t": the schedule alone is not measured (nothing to compare it with).
        #expect(stamps(#"{"aps":{},"s":1763830000000}"#) == (0, 0))
        // Not numbers, negative, nested, or garbage: no stamp, no crash.
        #expect(stamps(#"{"aps":{},"t":"1763830000123","s":-5}"#) == (0, 0))
        #expect(stamps(#"{"aps":{},"t":1763830000123,"s":"soon"}"#) == (1_763_830_000_123_000, 0))
        #expect(stamps(#"{"aps":{},"t":1763830000123,"s":-5}"#) == (1_763_830_000_123_000, 0))
        #expect(stamps(#"{"aps":{},"t":1763830000123,"s":0}"#) == (1_763_830_000_123_000, 0))
        // Beyond Int64: not a stamp. The largest Int64 is one (µs), far in the future: the
        // recorder counts it as such instead of recording it.
        #expect(stamps(#"{"aps":{},"t":17638300001234567890123}"#) == (0, 0))
        #expect(stamps(#"{"aps":{},"t":1763830000123,"s":9223372036854775807}"#) == (1_763_830_000_123_000, 9_223_372_036_854_775_807))
        var recorder = LatencyRecorder()
        recorder.record(stampMicros: 9_223_372_036_854_775_807, nowMicros: 1_763_830_000_123_000)
        #expect(recorder.count == 0 && recorder.percentiles.stampsInTheFuture == 1)
        #expect(stamps(#"{"aps":{"t":1763830000123}}"#) == (0, 0))
        #expect(stamps("\u{0}\u{ff}{{") == (0, 0))
        #expect(stamps("") == (0, 0))
    }

    @Test func aTooSmallSizeIsRefusedBeforeAnythingStarts() {
        var configuration = LoadGenConfiguration()
        configuration.payloadBytes = PayloadFactory.minimumBytes(for: .alert) - 1
        #expect(throws: LoadGenError.self) { try configuration.validate() }
        configuration.payloadBytes = 4097
        #expect(throws: LoadGenError.self) { try configuration.validate() }
    }

    @Test func stampsAreReadAsMillisecondsOrMicroseconds() {
        #expect(LatencyRecorder.stampMicros(1_763_830_000_123) == 1_763_830_000_123_000)
        #expect(LatencyRecorder.stampMicros(1_763_830_000_123_456) == 1_763_830_000_123_456)
        #expect(LatencyRecorder.stampMicros(0) == nil)
    }

    @Test func percentilesOfAKnownDistribution() throws {
        var recorder = LatencyRecorder()
        // 1 ms … 10 ms, one sample per µs step of 1: a uniform distribution of 9,001 values.
        for micros in 1_000...10_000 { recorder.record(stampMicros: 0, nowMicros: Int64(micros)) }
        let summary = recorder.percentiles
        #expect(summary.count == 9_001)
        // HdrHistogram keeps 3 significant digits: within 0.1 % (plus one bucket of 1 µs). Values are ms.
        func near(_ value: Double, _ expected: Double) -> Bool { abs(value - expected) <= expected * 0.002 + 0.001 }
        #expect(near(summary.p50, 5.5))
        #expect(near(summary.p90, 9.1))
        #expect(near(summary.p99, 9.91))
        #expect(summary.max == 10)
        #expect(summary.p50 <= summary.p90 && summary.p90 <= summary.p99 && summary.p99 <= summary.p999 && summary.p999 <= summary.max)
        #expect(zip(summary.curve, summary.curve.dropFirst()).allSatisfy { $0.percentile < $1.percentile && $0.milliseconds <= $1.milliseconds })
        #expect(summary.curve.last?.percentile == 100)

        // Through the stats JSON and back, as loadgen reads it.
        var statistics = MockAPNsStatistics()
        statistics.acceptedUnique = 9_001
        statistics.latency = summary
        let parsed = try #require(EmulatorStatistics(json: Array(statistics.json().utf8)))
        let report = try #require(parsed.latency)
        #expect(report.count == 9_001)
        #expect(abs(report.p99 - summary.p99) < 0.0005)
        #expect(report.curve.count == summary.curve.count)
        #expect(report.isMonotonic)
        // The JSON carries µs exactly, so the summary comes back unchanged (curve levels included).
        #expect(report == summary)
        #expect(parsed.latencyFromSchedule == nil)

        // A steady run's second summary travels beside the first, each under its own key.
        var fromSchedule = LatencyRecorder()
        for micros in 2_000...3_000 { fromSchedule.record(stampMicros: 0, nowMicros: Int64(micros)) }
        statistics.latencyFromSchedule = fromSchedule.percentiles
        let both = try #require(EmulatorStatistics(json: Array(statistics.json().utf8)))
        #expect(both.latency == summary)
        #expect(both.latencyFromSchedule == fromSchedule.percentiles)
    }

    @Test func answersBeforeTheirStampAreNotRecorded() {
        var recorder = LatencyRecorder()
        recorder.record(stampMicros: 10_000, nowMicros: 9_500)   // same millisecond: 0
        recorder.record(stampMicros: 10_000, nowMicros: 5_000)   // another clock: refused
        #expect(recorder.count == 1)
        #expect(recorder.percentiles.stampsInTheFuture == 1)
    }

    @Test func theLogScaleSpacesNinesEvenly() {
        #expect(abs(PercentilePlot.scale(percentile: 90) - 1) < 1e-12)
        #expect(abs(PercentilePlot.scale(percentile: 99) - 2) < 1e-12)
        #expect(abs(PercentilePlot.scale(percentile: 99.9) - 3) < 1e-9)
        #expect(abs(PercentilePlot.scale(percentile: 99.99) - 4) < 1e-9)
        #expect(abs(PercentilePlot.scale(percentile: 50) - 0.30103) < 1e-5)
        #expect(PercentilePlot.scale(percentile: 0) == 0)
        #expect(PercentilePlot.niceCeiling(0.7) == 1)
        #expect(PercentilePlot.niceCeiling(13) == 20)
        #expect(PercentilePlot.niceCeiling(450) == 500)
        #expect(PercentilePlot.niceCeiling(1000) == 1000)
    }

    @Test func numbersReadTheWayPeopleWriteThem() {
        #expect(PercentText.grouped(1_234_567) == "1,234,567")
        #expect(PercentText.grouped(999) == "999")
        #expect(PercentText.fixed(2.005, digits: 2) == "2.01" || PercentText.fixed(2.005, digits: 2) == "2.00")
        #expect(PercentText.fixed(0.5, digits: 3) == "0.500")
        #expect(PercentText.trimmed(2.50, digits: 3) == "2.5")
        #expect(PercentText.trimmed(3, digits: 3) == "3")
    }

    @Test func jobsCarryTheirTokensCollapseIDsAndPushTypes() throws {
        var configuration = LoadGenConfiguration()
        configuration.notifications = 1_000
        configuration.tokens = 100
        configuration.fanout = 4
        configuration.collapseRatio = 0.5
        configuration.pushTypes = try PushTypeMix(parsing: "alert=0.5,background=0.5")
        configuration.unregisteredPrefix = "dead"
        configuration.unregisteredShare = 0.1
        let factory = JobFactory(configuration: configuration)
        let tokens = (0..<100).map(factory.token)
        #expect(Set(tokens).count == 100)
        #expect(tokens.allSatisfy { $0.utf8.count == 64 })
        #expect(tokens.filter { $0.hasPrefix("dead") }.count == 10)
        var collapsed = 0
        var background = 0
        for index in 0..<configuration.jobs {
            let fields = factory.fields(job: index, stampMicros: 1_763_830_000_000_000)
            func value(_ name: String) -> String? { fields.first { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) } }
            #expect(value(JobField.tokens)?.split(separator: ",").count == 4)
            #expect(value(JobField.payload)?.utf8.count == 256)
            let collapseID = try #require(value(JobField.collapseID))
            if collapseID != "c\(index)" { collapsed += 1 }
            if value(JobField.pushType) == "background" {
                background += 1
                #expect(value(JobField.priority) == "5")
            }
        }
        // Seeded draws: near the ratios, not exactly.
        #expect((80...170).contains(collapsed))
        #expect((80...170).contains(background))
    }

    @Test func pushTypeMixesAreParsedAndNormalised() throws {
        let mix = try PushTypeMix(parsing: "alert=9,background=1")
        #expect(mix.type(forDraw: 0.0) == .alert)
        #expect(mix.type(forDraw: 0.89) == .alert)
        #expect(mix.type(forDraw: 0.95) == .background)
        #expect(mix.description == "alert=0.9,background=0.1")
        #expect(throws: LoadGenError.self) { try PushTypeMix(parsing: "alert=1,telegram=1") }
    }

    @Test func procStatIsReadAfterTheCommandName() {
        // A command name with spaces and a parenthesis must not shift the fields.
        let stat = "4242 (herald (w) 1) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 12345 0 0"
        #expect(ProcessSampler.cpuTicks(statText: stat) == 325)
    }

    @Test func theTimelineKeepsEachWindowAndShowsAStallAsAGap() throws {
        var timeline = LatencyTimeline(windowMicros: 10_000, overMicros: 5_000)
        let start: Int64 = 1_800_000_000_000_000  // a window boundary
        timeline.record(stampMicros: start - 999, nowMicros: start + 1)              // 1 ms
        timeline.record(stampMicros: start + 3_999, nowMicros: start + 9_999)        // 6 ms, over
        timeline.record(stampMicros: start + 30_000, nowMicros: start + 25_000)      // stamped after the answer: 0
        let windows = timeline.windows
        #expect(windows.count == 3)
        #expect(windows[0] == LatencyWindow(startMicros: start, answered: 2, meanMicros: 3_500, maxMicros: 6_000, over: 1))
        #expect(windows[1] == LatencyWindow(startMicros: start + 10_000, answered: 0, meanMicros: 0, maxMicros: 0, over: 0))
        #expect(windows[2] == LatencyWindow(startMicros: start + 20_000, answered: 1, meanMicros: 0, maxMicros: 0, over: 0))
        // What the stats port serves reads back as the same windows.
        let series = try #require(LatencySeries(json: Array(timeline.json.utf8)))
        #expect(series.windows == windows)
        #expect(series.windowMicros == 10_000 && series.overMicros == 5_000)
    }

    @Test func theTimelineIsBoundedAndCountsWhatItDrops() {
        var timeline = LatencyTimeline(windowMicros: 1_000, overMicros: 0, capacity: 4)
        for window in 0..<10 { timeline.record(stampMicros: Int64(window) * 1_000, nowMicros: Int64(window) * 1_000 + 500) }
        #expect(timeline.windows.map(\.startMicros) == [6_000, 7_000, 8_000, 9_000])
        #expect(timeline.windows.allSatisfy { $0.answered == 1 && $0.over == 1 && $0.maxMicros == 500 })
        #expect(timeline.windowsDropped == 6)
        // Older than the ring holds (a clock stepped back): not placed, counted.
        timeline.record(stampMicros: 0, nowMicros: 3_500)
        #expect(timeline.answersDropped == 1)
        #expect(timeline.windows.reduce(0) { $0 + $1.answered } == 4)
        // A stall longer than the ring: the windows held are the empty ones before the answer.
        timeline.record(stampMicros: 99_000, nowMicros: 100_200)
        #expect(timeline.windows.map(\.startMicros) == [97_000, 98_000, 99_000, 100_000])
        #expect(timeline.windows.map(\.answered) == [0, 0, 0, 1])
        #expect(timeline.windowsDropped == 97)
    }

    @Test func aFullTimelineTravelsWhole() throws {
        var timeline = LatencyTimeline()  // 10 ms windows, 65,536 of them
        for window in 0..<Int64(70_000) { timeline.record(stampMicros: window * 10_000, nowMicros: window * 10_000 + 2_000) }
        let series = try #require(LatencySeries(json: Array(timeline.json.utf8)))
        #expect(series.windows.count == LatencyTimeline.defaultCapacity)
        #expect(series.windows.first?.startMicros == Int64(70_000 - LatencyTimeline.defaultCapacity) * 10_000)
        #expect(series.windowsDropped == Int64(70_000 - LatencyTimeline.defaultCapacity))
        #expect(series.answered == LatencyTimeline.defaultCapacity && series.over == 0)
    }

    @Test func stretchesOfSlowAnswersAreJoinedAcrossOneQuietWindowAndRankedByTheirCount() {
        func window(_ index: Int64, over: Int, max: Int64 = 0) -> LatencyWindow {
            LatencyWindow(startMicros: index * 10_000, answered: 100, meanMicros: 1_000, maxMicros: max, over: over)
        }
        let series = LatencySeries(windowMicros: 10_000, overMicros: 5_000, windows: [
            window(0, over: 3, max: 6_000), window(1, over: 0), window(2, over: 5, max: 9_000),  // one stretch: 0–30 ms
            window(3, over: 0), window(4, over: 0),
            window(5, over: 20, max: 7_000),                                                      // 50–60 ms
            window(6, over: 0), window(7, over: 0), window(8, over: 1, max: 5_100),               // 80–90 ms
        ])
        #expect(series.stretches == [
            .init(startMicros: 50_000, endMicros: 60_000, over: 20, maxMicros: 7_000),
            .init(startMicros: 0, endMicros: 30_000, over: 8, maxMicros: 9_000),
            .init(startMicros: 80_000, endMicros: 90_000, over: 1, maxMicros: 5_100),
        ])
        #expect(series.over == 29 && series.answered == 900 && series.windowsWithOver == 4)
        #expect(series.between(20_000, 50_000).windows.map(\.startMicros) == [20_000, 30_000, 40_000, 50_000])
        let csv = series.csv(originMicros: 10_000).split(separator: "\n")
        #expect(csv.count == 10)
        #expect(csv[0] == "offset_ms,unix_ms,answered,mean_ms,max_ms,over_5ms")
        #expect(csv[1] == "-10,0,100,1,6,3")
        #expect(csv[3] == "10,20,100,1,9,5")
    }

    @Test func aTimelineThatIsNotOneIsRefused() {
        let good = #"{"window_us":10000,"over_us":5000,"first_start_us":0,"windows_dropped":0,"answers_dropped":0,"answered":[1],"mean_us":[2],"max_us":[3],"over":[0]}"#
        #expect(LatencySeries(json: Array(good.utf8)) != nil)
        for bad in [
            "", "[]", "{}", "not json",
            good.replacingOccurrences(of: #""mean_us":[2]"#, with: #""mean_us":[2,3]"#),  // arrays of different lengths
            good.replacingOccurrences(of: #""answered":[1]"#, with: #""answered":[-1]"#),
            good.replacingOccurrences(of: #""answered":[1]"#, with: #""answered":["1"]"#),
            good.replacingOccurrences(of: #""window_us":10000"#, with: #""window_us":0"#),
            good.replacingOccurrences(of: #","over":[0]"#, with: ""),
        ] {
            #expect(LatencySeries(json: Array(bad.utf8)) == nil, "\(bad)")
        }
    }

    @Test func schedstatGivesTheRunQueueDelay() {
        #expect(ProcessSampler.runQueueWait(schedstatText: "2391822411 18446744 9122\n") == 18_446_744)
        #expect(ProcessSampler.runQueueWait(schedstatText: "2391822411 0 9122") == 0)
        for garbage in ["", "\n", "12 34", "12 x 56", "12 -3 56"] {
            #expect(ProcessSampler.runQueueWait(schedstatText: garbage) == nil, "\(garbage.debugDescription)")
        }
    }

    /// More spinning threads than cores: together they wait for a CPU at least as long as the
    /// cores could not run them, and the sampler (of this very process) must see that, and keep
    /// it once the threads have exited.
    @Test func threadsThatOutnumberTheCoresAreSeenWaiting() throws {
        guard ProcessSampler.runQueueWaits(pid: getpid()) != nil else { return }  // no schedstat in this kernel
        let cores = max(1, min(32, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        let sampler = ProcessSampler(pids: [getpid()])
        sampler.sample()
        let before = try #require(sampler.totalCPUWaitSeconds)
        let spinMilliseconds = 300.0
        let spun = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let threadIDs = Mutex<[pid_t]>([])
        for _ in 0...cores {
            Thread.detachNewThread {
                threadIDs.withLock { $0.append(LoadGenUnitTests.threadID() ?? 0) }
                let start = DispatchTime.now().uptimeNanoseconds
                var spins = 0
                while Double(DispatchTime.now().uptimeNanoseconds - start) < spinMilliseconds * 1e6 { spins &+= 1 }
                spun.signal()
                release.wait()  // alive until sampled
            }
        }
        for _ in 0...cores { spun.wait() }
        sampler.sample()
        let waited = try #require(sampler.totalCPUWaitSeconds) - before
        // cores + 1 threads for 0.3 s on `cores` CPUs: at least 0.3 s of waiting among them (the
        // test runner's other work only adds to it); half of that leaves room for clock rounding.
        #expect(waited >= spinMilliseconds / 1000 / 2, "waited \(waited) s with \(cores + 1) threads on \(cores) cores")
        for _ in 0...cores { release.signal() }
        // Gone from /proc: only then does the next sample lack them.
        let tids = threadIDs.withLock { $0 }
        let deadline = DispatchTime.now().uptimeNanoseconds + 10_000_000_000
        while tids.contains(where: { access("/proc/self/task/\($0)", F_OK) == 0 }) && DispatchTime.now().uptimeNanoseconds < deadline {
            usleep(1_000)
        }
        #expect(tids.count == cores + 1 && !tids.contains(0) && !tids.contains { access("/proc/self/task/\($0)", F_OK) == 0 }, "the spinning threads did not exit")
        sampler.sample()
        #expect(try #require(sampler.totalCPUWaitSeconds) - before >= waited, "an exited thread's wait was dropped")
    }

    /// A stats port that never stops talking (a hostile or broken emulator or worker): the
    /// client gives up at its bound instead of growing without one.
    @Test func aServerThatNeverStopsTalkingIsCutOff() throws {
        let (listener, port) = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { close(listener) }
        let served = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer { served.signal() }
            var entry = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 10_000) == 1 else { return }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            defer { close(client) }
            _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) & ~O_NONBLOCK)
            var head = [UInt8](repeating: 0, count: 4096)
            _ = read(client, &head, head.count)
            let status = Array("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n".utf8)
            _ = status.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
            // 32 MiB unless the client hangs up first.
            for _ in 0..<32 where chunk.withUnsafeBytes({ send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) > 0 {}
        }
        // Only the size is kept: a failure must not print megabytes.
        let taken = LocalHTTPClient.get(host: "127.0.0.1", port: port, path: "/_herald/timeline", maxResponseBytes: 4 << 20)?.body.count
        #expect(taken == nil, "a response of \(taken ?? 0) bytes was taken")
        served.wait()
    }

    /// The calling thread's id, from "/proc/thread-self" ("PID/task/TID").
    static func threadID() -> pid_t? {
        var link = [UInt8](repeating: 0, count: 64)
        let length = link.withUnsafeMutableBytes { readlink("/proc/thread-self", $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count - 1) }
        guard length > 0 else { return nil }
        return String(decoding: link.prefix(length), as: UTF8.self).split(separator: "/").last.flatMap { pid_t($0) }
    }

    @Test func prometheusSumsMatchLabels() {
        let text = """
            # TYPE herald_notifications_total counter
            herald_notifications_total{app="default",queue="default",outcome="accepted"} 990
            herald_notifications_total{app="default",queue="default",outcome="superseded"} 7
            herald_notifications_total{app="other",queue="default",outcome="superseded"} 3
            herald_notifications_total_created 1
            """
        #expect(PrometheusScrape.sum(text, metric: "herald_notifications_total", labels: ["outcome=\"superseded\""]) == 10)
        #expect(PrometheusScrape.sum(text, metric: "herald_notifications_total") == 1000)
    }

    @Test func addressesDefaultToLoopback() {
        for (text, host, port) in [("127.0.0.1:9464", "127.0.0.1", 9464), (":9464", "127.0.0.1", 9464), ("http://localhost:80/metrics", "localhost", 80)] {
            let address = LocalHTTPClient.address(text)
            #expect(address?.host == host && address?.port == port, "\(text)")
        }
        #expect(LocalHTTPClient.address("nope") == nil)
    }
}
