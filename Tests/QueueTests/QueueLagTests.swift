import Queue
import Testing
import Transport

/// A queue's lag (`QueueLag`): Redis's own count when it gives one, else depth - pending, made
/// exact (0) when nothing lies after the group's last-delivered id.
struct QueueLagTests {
    @Test func redisCountIsExactAndTheEstimateNeverGoesBelowZero() {
        #expect(QueueLag.of(reported: 7, depth: 100, pending: 3) == (7, true))
        #expect(QueueLag.of(reported: nil, depth: 100, pending: 3) == (97, false))
        #expect(QueueLag.of(reported: nil, depth: 2, pending: 5) == (0, false), "leased entries can outnumber the stream's")
        #expect(QueueLag.of(reported: Int64.max, depth: 0, pending: 0).lag == Int.max)
    }

    @Test func theCaughtUpCheckAsksForOneEntryAfterTheLastDeliveredID() {
        #expect(QueueLag.caughtUpCheck(stream: "herald:{q}:jobs", lastDelivered: "1700000000000-3")
                == ["XRANGE", "herald:{q}:jobs", "(1700000000000-3", "+", "COUNT", "1"])
    }

    @Test func onlyAnEmptyRangeMeansCaughtUp() {
        #expect(QueueLag.isCaughtUp(.array([])))
        let entry = RedisReply.array([.bulk(Array("1-1".utf8)), .array([.bulk(Array("token".utf8)), .bulk(Array("ab".utf8))])])
        #expect(!QueueLag.isCaughtUp(.array([entry])))
        // A refusal (NOPERM), a missing answer or anything else keeps the estimate.
        #expect(!QueueLag.isCaughtUp(.error("NOPERM this user has no permissions to run the 'xrange' command")))
        #expect(!QueueLag.isCaughtUp(.null))
        #expect(!QueueLag.isCaughtUp(.integer(0)))
    }
}
