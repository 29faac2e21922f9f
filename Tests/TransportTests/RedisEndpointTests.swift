import Testing

@testable import Transport

/// `redis://` URLs as operators write them, and as a hostile or careless one might: every bad
/// one is a clear `RedisError.invalidURL`, never a crash, and no error or description repeats
/// the password.
@Suite struct RedisEndpointTests {
    @Test func percentEncodedCredentialsAreDecoded() throws {
        let endpoint = try RedisEndpoint(url: "redis://app%2Fone:p%40ss%3Aw%2Fo%25rd@cache.internal:6380/2")
        #expect(endpoint.user == "app/one")
        #expect(endpoint.password == "p@ss:w/o%rd")
        #expect(endpoint.host == "cache.internal")
        #expect(endpoint.port == 6380)
        #expect(endpoint.database == 2)
    }

    @Test func unencodedAtAndSlashInThePasswordStayInThePassword() throws {
        let endpoint = try RedisEndpoint(url: "redis://:se/cr@et@10.0.0.5")
        #expect(endpoint.password == "se/cr@et")
        #expect(endpoint.host == "10.0.0.5")
        #expect(endpoint.port == 6379)
        #expect(endpoint.database == 0)
    }

    @Test func aLoneCredentialIsThePasswordAsRedisCliReadsIt() throws {
        let endpoint = try RedisEndpoint(url: "redis://hunter2@localhost")
        #expect(endpoint.user == nil)
        #expect(endpoint.password == "hunter2")
    }

    @Test func ipv6AddressesInBrackets() throws {
        let endpoint = try RedisEndpoint(url: "redis://[::1]:7000/1")
        #expect(endpoint.host == "::1")
        #expect(endpoint.port == 7000)
        #expect(endpoint.description == "redis://[::1]:7000/1")
    }

    @Test func rediss_isTLSAndAnotherAddressKeepsLoginAndTLS() throws {
        var endpoint = try RedisEndpoint(url: "rediss://app:pw@cache.internal:6380/2")
        endpoint.tls?.caFile = "/etc/herald/redis-ca.pem"
        #expect(endpoint.description == "rediss://app:***@cache.internal:6380/2")
        let moved = endpoint.at(host: "10.0.0.7", port: 7001)
        #expect(moved.host == "10.0.0.7" && moved.port == 7001)
        #expect(moved.user == "app" && moved.password == "pw" && moved.database == 2)
        #expect(moved.tls == RedisTLS(caFile: "/etc/herald/redis-ca.pem"))
        #expect(try RedisEndpoint(url: "redis://cache.internal").tls == nil)
    }

    @Test func descriptionAndChildURLNeverHoldThePassword() throws {
        let endpoint = try RedisEndpoint(url: "redis://ops:TopSecret1@redis:6379/3")
        #expect(endpoint.description == "redis://ops:***@redis:6379/3")
        #expect(endpoint.urlWithoutPassword == "redis://ops:@redis:6379/3")
        #expect(try RedisEndpoint(url: endpoint.urlWithoutPassword).password == nil)
        #expect(try RedisEndpoint(url: endpoint.urlWithoutPassword).user == "ops")
    }

    @Test(arguments: [
        "redis://", "redis://:6379", "redis://:pw@", "redis://:pw@:6379/0",  // empty host
        "redis://host:0", "redis://host:70000", "redis://host:-1", "redis://host:", "redis://host:65536",
        "redis://host:99999999999999999999999", "redis://host:6379abc",
        "redis://host/abc", "redis://host/-1", "redis://host/99999999999999999999", "redis://host/0?timeout=1",
        "redis://ho st", "redis://host\u{0}evil", "redis://a::b", "redis://[::1", "redis://[::1]x",
        "http://host", "redis+tls://host", "host:6379", "", "redis:/host",
        "redis://:pw%4@host", "redis://:pw%zz@host", "redis://:%ff%fe@host",
        "redis://" + String(repeating: "a", count: 300),
        "redis://" + String(repeating: "h", count: 5000),
    ])
    func badURLsAreClearErrors(url: String) {
        #expect(throws: RedisError.self) { try RedisEndpoint(url: url) }
        do {
            _ = try RedisEndpoint(url: url)
        } catch {
            guard case .invalidURL(let message) = error else {
                Issue.record("expected invalidURL, got \(error)")
                return
            }
            #expect(!message.isEmpty)
            #expect(error.description.utf8.count < 400, "an error echoes at most a short part of the URL")
        }
    }

    @Test(arguments: [
        "redis://:TopSecret1@host:70000", "redis://ops:TopSecret1@host/db", "redis://:TopSecret1@",
        "https://ops:TopSecret1@host", "redis://:TopSecret1%zz@host", "TopSecret1@host",
        "redis://ops:TopSecret1@[::1", "redis://:TopSecret1@ho st",
    ])
    func errorsNeverRepeatThePassword(url: String) {
        do {
            _ = try RedisEndpoint(url: url)
            Issue.record("\(url) should not parse")
        } catch {
            #expect(!error.description.contains("TopSecret1"), "\(error.description)")
        }
    }
}
