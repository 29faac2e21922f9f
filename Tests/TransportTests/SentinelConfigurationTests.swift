import Testing

@testable import Transport

/// `--sentinel`, `--sentinel-master` and the Redis URL that goes with them, as operators write
/// them and as a careless one might: every bad one is a clear `RedisError.invalidURL` that says
/// what to write instead, and no message repeats a password.
@Suite struct SentinelConfigurationTests {
    @Test func addressesWithAndWithoutPorts() throws {
        let configuration = try SentinelConfiguration(list: "10.0.0.1:26380, sentinel-b ,[::1]:5000,[fe80::1]", masterName: "mymaster")
        #expect(configuration.sentinels == [
            .init(host: "10.0.0.1", port: 26380), .init(host: "sentinel-b", port: 26379),
            .init(host: "::1", port: 5000), .init(host: "fe80::1", port: 26379),
        ])
        #expect(configuration.summary == "mymaster via 10.0.0.1:26380,sentinel-b:26379,[::1]:5000,[fe80::1]:26379")
    }

    @Test(arguments: [
        ("", "empty entry"), ("a:1,,b:2", "empty entry"), ("host:0", "must be 1 to 65535"), ("host:70000", "must be 1 to 65535"),
        ("host:", "must be 1 to 65535"), ("::1:26379", "in brackets"), ("[::1:26379", "no closing ]"), ("[::1]x", "unexpected text"),
        ("bad host:1", "may hold only"), ("h\u{0}st:1", "may hold only"),
    ])
    func badAddressesAreRefusedWithTheReason(list: String, reason: String) {
        #expect {
            _ = try SentinelConfiguration(list: list, masterName: "m")
        } throws: { error in
            "\(error)".contains(reason)
        }
    }

    @Test func tooManySentinelsAreRefused() {
        let list = (1...17).map { "10.0.0.\($0):26379" }.joined(separator: ",")
        #expect(throws: RedisError.self) { _ = try SentinelConfiguration(list: list, masterName: "m") }
    }

    @Test(arguments: ["", "my master", "line\nbreak", String(repeating: "m", count: 257)])
    func badMasterNamesAreRefused(name: String) {
        #expect(throws: RedisError.self) { _ = try SentinelConfiguration(list: "127.0.0.1", masterName: name) }
    }

    @Test func theRedisURLKeepsCredentialsAndDatabaseButNoHost() throws {
        let endpoint = try SentinelConfiguration.masterEndpoint(url: "redis://herald:s%40cret@/2")
        #expect(endpoint.user == "herald")
        #expect(endpoint.password == "s@cret")
        #expect(endpoint.database == 2)
        #expect(endpoint.host == SentinelConfiguration.standInHost)
        #expect(try SentinelConfiguration.masterEndpoint(url: "redis://").database == 0)
        #expect(try SentinelConfiguration.masterEndpoint(url: nil).password == nil)
    }

    @Test(arguments: ["redis://redis:6379", "redis://:TopSecret1@10.0.0.5/1", "redis://user:TopSecret1@:6380", "redis://[::1]"])
    func aHostInTheRedisURLIsRefusedWithSentinel(url: String) {
        #expect {
            _ = try SentinelConfiguration.masterEndpoint(url: url)
        } throws: { error in
            let text = "\(error)"
            return text.contains("may not name a host") && text.contains("redis://herald:@/2") && !text.contains("TopSecret1")
        }
    }

    @Test func repliesThatMeanNotAWritableMaster() {
        #expect(RedisSentinelResolver.meansNotWritableMaster("READONLY You can't write against a read only replica."))
        #expect(RedisSentinelResolver.meansNotWritableMaster("LOADING Redis is loading the dataset in memory"))
        #expect(RedisSentinelResolver.meansNotWritableMaster("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."))
        #expect(RedisSentinelResolver.meansNotWritableMaster("NOREPLICAS Not enough good replicas to write."))
        #expect(!RedisSentinelResolver.meansNotWritableMaster("NOGROUP No such key"))
        #expect(!RedisSentinelResolver.meansNotWritableMaster("WRONGTYPE Operation against a key holding the wrong kind of value"))
    }
}
