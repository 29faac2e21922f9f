import Testing

@testable import Transport

/// Timers that are scheduled and cancelled all day long (one per metrics connection, per Redis
/// connect) must not leave anything behind in the loop.
@Suite struct EventLoopTimerTests {
    /// Turns `loop` until `condition` holds (at most `turns` iterations of 1 ms timers).
    static func turn(_ loop: EventLoop, turns: Int = 1_000, until condition: () -> Bool) {
        var remaining = turns
        while !condition() && remaining > 0 {
            remaining -= 1
            loop.schedule(afterMilliseconds: 1) { loop.stop() }
            loop.run()
        }
    }

    @Test func cancellingPendingTimersKeepsTheBookkeepingBounded() throws {
        let loop = try EventLoop()
        // A long-lived timer, as the worker's heartbeat keeps one: the heap is never empty.
        loop.schedule(afterMilliseconds: 3_600_000) {}
        var largest = 0
        for _ in 0..<100_000 {
            let timer = loop.schedule(afterMilliseconds: 10_000) { Issue.record("a cancelled timer ran") }
            loop.cancel(timer)
            let (heap, cancelled) = loop.timerBookkeeping
            largest = max(largest, heap + cancelled)
        }
        #expect(largest <= 200, "timer bookkeeping grew to \(largest) entries")
    }

    @Test func cancellingTimersThatAlreadyRanLeavesNothingBehind() throws {
        let loop = try EventLoop()
        loop.schedule(afterMilliseconds: 3_600_000) {}
        var fired = 0
        var timers: [EventLoop.TimerID] = []
        for _ in 0..<2_000 { timers.append(loop.schedule(afterMilliseconds: 0) { fired += 1 }) }
        EventLoopTimerTests.turn(loop) { fired == 2_000 }
        #expect(fired == 2_000)
        // As the metrics server did: cancel on close, long after the timer ran.
        for timer in timers { loop.cancel(timer) }
        let (heap, cancelled) = loop.timerBookkeeping
        #expect(heap + cancelled <= 100, "heap \(heap), cancelled \(cancelled)")
    }

    @Test func compactionKeepsLiveTimersAndTheirOrder() throws {
        let loop = try EventLoop()
        var order: [Int] = []
        for index in 0..<50 { loop.schedule(afterMilliseconds: Int64(50 - index)) { order.append(index) } }
        for _ in 0..<10_000 { loop.cancel(loop.schedule(afterMilliseconds: 5) { Issue.record("a cancelled timer ran") }) }
        EventLoopTimerTests.turn(loop) { order.count == 50 }
        #expect(order == Array((0..<50).reversed()))
        #expect(loop.timerBookkeeping.heap == 0)
    }

    @Test func aHugeDelayDoesNotOverflow() throws {
        let loop = try EventLoop()
        let timer = loop.schedule(afterMilliseconds: .max) { Issue.record("ran") }
        loop.cancel(timer)
        var ran = false
        loop.schedule(afterMilliseconds: 0) { ran = true }
        EventLoopTimerTests.turn(loop) { ran }
        #expect(ran)
    }
}
