import Testing
import Transport

/// Redis Cluster's slot function and the redirect replies, against the vectors Redis itself
/// documents (the cluster specification's CRC16 check value and hash-tag examples). The same
/// function is checked against a real cluster's `CLUSTER KEYSLOT` answers in the integration
/// suite (`RedisClusterTests.slotFunctionAgreesWithRedis`).
@Suite
struct RedisClusterSlotTests {
    @Test
    func crc16MatchesTheXmodemCheckValue() {
        // The CRC16-XMODEM check value: the cluster specification's own test vector.
        #expect(RedisClusterSlot.crc16("123456789") == 0x31C3)
        #expect(RedisClusterSlot.crc16("") == 0)
    }

    @Test
    func hashTagsFollowTheSpecification() {
        // Only the text between the first { and the first } after it counts, when not empty.
        #expect(RedisClusterSlot.of(key: "{user1000}.following") == RedisClusterSlot.of(key: "{user1000}.followers"))
        #expect(RedisClusterSlot.of(key: "{user1000}.following") == RedisClusterSlot.of(key: "user1000"))
        #expect(RedisClusterSlot.of(key: "foo{}{bar}") == Int(RedisClusterSlot.crc16("foo{}{bar}")) % 16384)
        #expect(RedisClusterSlot.of(key: "foo{{bar}}zap") == RedisClusterSlot.of(key: "{bar"))
        #expect(RedisClusterSlot.of(key: "foo{bar}{zap}") == RedisClusterSlot.of(key: "bar"))
        #expect(RedisClusterSlot.of(key: "123456789") == 0x31C3 % 16384)
    }

    @Test
    func everyKeyOfAQueueSharesTheQueueSlot() {
        for queue in ["default", "alerts-0", "orders", "a}b"] {
            let slot = RedisClusterSlot.of(queue: queue)
            for suffix in ["jobs", "retry", "dead", "feedback"] where !queue.contains("}") {
                #expect(RedisClusterSlot.of(key: "herald:{\(queue)}:\(suffix)") == slot)
            }
            #expect((0..<16384).contains(slot))
        }
    }

    @Test
    func redirectRepliesAreRead() {
        #expect(RedisClusterRedirect(errorMessage: "MOVED 3999 127.0.0.1:6381")
                == .moved(slot: 3999, node: .init(host: "127.0.0.1", port: 6381)))
        #expect(RedisClusterRedirect(errorMessage: "ASK 3999 10.0.0.2:7000") == .ask(slot: 3999, node: .init(host: "10.0.0.2", port: 7000)))
        #expect(RedisClusterRedirect(errorMessage: "MOVED 12 [::1]:7001") == .moved(slot: 12, node: .init(host: "::1", port: 7001)))
        #expect(RedisClusterRedirect(errorMessage: "CLUSTERDOWN The cluster is down") == .clusterDown)
        #expect(RedisClusterRedirect(errorMessage: "TRYAGAIN Multiple keys request during rehashing of slot") == .tryAgain)
        #expect(RedisClusterRedirect(errorMessage: "READONLY You can't write against a read only replica.") == .notMaster)
        // Hostile or unrelated answers are not redirects.
        #expect(RedisClusterRedirect(errorMessage: "MOVED 99999 127.0.0.1:6381") == nil)
        #expect(RedisClusterRedirect(errorMessage: "MOVED 1 127.0.0.1:0") == nil)
        #expect(RedisClusterRedirect(errorMessage: "MOVED 1 bad host:1") == nil)
        #expect(RedisClusterRedirect(errorMessage: "MOVED") == nil)
        #expect(RedisClusterRedirect(errorMessage: "ERR unknown command") == nil)
    }

    @Test
    func clusterURLsAreParsedAndRedacted() throws {
        let seeds = try RedisClusterSeeds(url: "redis+cluster://herald:s3cret@10.0.0.1:7000,10.0.0.2:7001/")
        #expect(seeds.endpoints.map(\.port) == [7000, 7001])
        #expect(seeds.endpoints.allSatisfy { $0.user == "herald" && $0.password == "s3cret" })
        #expect(!seeds.description.contains("s3cret"))
        #expect(seeds.description == "redis+cluster://herald:***@10.0.0.1:7000,10.0.0.2:7001/")
        #expect(seeds.endpoint(for: .init(host: "10.0.0.9", port: 7005)).password == "s3cret")
        #expect(throws: RedisError.self) { try RedisClusterSeeds(url: "redis+cluster://10.0.0.1:7000,,10.0.0.2:7001") }
        #expect(throws: RedisError.self) { try RedisClusterSeeds(url: "redis+cluster://10.0.0.1:7000/3") }
        #expect(throws: RedisError.self) { try RedisClusterSeeds(url: "redis://10.0.0.1:7000") }
        #expect(throws: RedisError.self) { try RedisClusterSeeds(url: "redis+cluster://10.0.0.1:99999") }
    }

    @Test
    func hostileSlotMapsAreRefusedNotTrusted() {
        // A range whose bounds are not numbers, a port out of range: protocol errors, no crash.
        let badRange: RedisReply = .array([.array([.bulk(Array("x".utf8)), .integer(5), .array([.bulk(Array("127.0.0.1".utf8)), .integer(7000)])])])
        #expect(throws: RedisError.self) { try RedisClusterMap.fromSlots(badRange, askedHost: "127.0.0.1") }
        let badPort: RedisReply = .array([.array([.integer(0), .integer(5), .array([.bulk(Array("127.0.0.1".utf8)), .integer(70000)])])])
        #expect(throws: RedisError.self) { try RedisClusterMap.fromSlots(badPort, askedHost: "127.0.0.1") }
        #expect(throws: RedisError.self) { try RedisClusterMap.fromShards(.integer(3), askedHost: "127.0.0.1") }
        // An empty address means the node asked (Redis' rule), and slots beyond 16383 are clamped.
        let blank: RedisReply = .array([.array([.integer(16000), .integer(99999), .array([.bulk([]), .integer(7000)])])])
        let map = try? RedisClusterMap.fromSlots(blank, askedHost: "10.1.1.1")
        #expect(map?.owner(ofSlot: 16383) == .init(host: "10.1.1.1", port: 7000))
        #expect(map?.owner(ofSlot: 0) == nil)
    }
}
