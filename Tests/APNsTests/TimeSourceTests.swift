import Testing

@testable import APNs

@Suite struct TimeSourceTests {
    @Test func systemClockIsNearNow() {
        let now = TimeSource.system.nowMilliseconds()
        #expect(now > 1_704_067_200_000)  // 2024-01-01
        #expect(now < 4_102_444_800_000)  // 2100-01-01
    }

    @Test func systemSecondsAgreeWithMilliseconds() {
        let milliseconds = TimeSource.system.nowMilliseconds()
        let seconds = TimeSource.system.nowSeconds()
        #expect(seconds >= milliseconds / 1000 && seconds <= milliseconds / 1000 + 1)
    }

    @Test func manualClockStartsWhereTold() {
        #expect(TimeSource.manual(ManualTime(milliseconds: 1_700_000_000_000)).nowMilliseconds() == 1_700_000_000_000)
        #expect(ManualTime().nowMilliseconds() == 0)
    }

    @Test func manualClockSeesLaterChanges() {
        let time = ManualTime(milliseconds: 1000)
        let source = TimeSource.manual(time)
        time.advance(by: .seconds(3600))
        #expect(source.nowMilliseconds() == 3_601_000)
        time.set(5)
        #expect(source.nowMilliseconds() == 5)
    }

    @Test func advanceCountsWholeMilliseconds() {
        let time = ManualTime()
        time.advance(by: .milliseconds(1500))
        time.advance(by: .microseconds(999))
        #expect(time.nowMilliseconds() == 1500)
        time.advance(by: .microseconds(1001))
        #expect(time.nowMilliseconds() == 1501)
    }

    @Test func advanceCanGoBackwards() {
        let time = ManualTime(milliseconds: 10_000)
        time.advance(by: .seconds(-4))
        #expect(time.nowMilliseconds() == 6000)
    }

    @Test func nowSecondsRoundsDown() {
        let time = ManualTime(milliseconds: 1_700_000_000_999)
        #expect(TimeSource.manual(time).nowSeconds() == 1_700_000_000)
        time.set(-1)
        #expect(TimeSource.manual(time).nowSeconds() == -1)
    }

    @Test func concurrentAdvancesAreAllCounted() async {
        let time = ManualTime()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    for _ in 0..<100 { time.advance(by: .milliseconds(1)) }
                }
            }
        }
        #expect(time.nowMilliseconds() == 10_000)
    }
}
