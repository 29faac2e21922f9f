@testable import Queue
import Testing
import Transport

/// Which key a tool command is routed by on a Redis Cluster (`ClusterRedisClient.slot(of:)`):
/// the key's position differs per command, and a wrong guess sends it to the wrong master.
@Suite
struct ClusterRoutingTests {
    let keys = QueueKeys(queue: "alerts-3")
    var slot: Int { RedisClusterSlot.of(queue: "alerts-3") }

    @Test
    func everyCommandTheToolsSendIsRoutedByItsKey() {
        let commands: [[RedisArgument]] = [
            ["XADD", .text(keys.jobs), "*", "token", "aa"],
            ["XLEN", .text(keys.dead)],
            ["ZCARD", .text(keys.retry)],
            ["XRANGE", .text(keys.dead), "-", "+"],
            ["XINFO", "GROUPS", .text(keys.jobs)],
            ["XINFO", "STREAM", .text(keys.feedback)],
            ["XGROUP", "CREATE", .text(keys.jobs), "herald", "0", "MKSTREAM"],
            ["XPENDING", .text(keys.jobs), "herald"],
            ["XREAD", "COUNT", "10", "BLOCK", "5000", "STREAMS", .text(keys.feedback), "0"],
            ["XREADGROUP", "GROUP", "herald", "c", "COUNT", "1", "STREAMS", .text(keys.jobs), ">"],
            ["EVAL", "return 1", "2", .text(keys.dead), .text(keys.jobs)],
            ["XDEL", .bytes(Array(keys.dead.utf8)), "1-0"],
        ]
        for command in commands {
            #expect(ClusterRedisClient.slot(of: command) == slot, "\(RedisCommandText.name(command))")
        }
    }

    @Test
    func keylessCommandsGoToAnyMaster() {
        for command: [RedisArgument] in [["TIME"], ["PING"], ["SCAN", "0", "MATCH", "herald:{*}:jobs"], ["EVAL", "return 1", "0"], ["INFO", "server"]] {
            #expect(ClusterRedisClient.slot(of: command) == nil, "\(RedisCommandText.name(command))")
        }
    }
}
