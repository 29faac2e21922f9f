/// The nodes Herald asks for a Redis Cluster's slot map, and the credentials for every node.
///
/// Given as `redis+cluster://[user[:password]@]host:port,host:port[/]` or as a plain `redis://`
/// URL with `--redis-cluster`. Any one reachable node is enough: each knows the whole map. More
/// seeds only help when some are down at start. Redis Cluster has only database 0, so a URL
/// naming another database is refused.
public struct RedisClusterSeeds: Sendable, Equatable, CustomStringConvertible {
    public static let scheme = "redis+cluster://"

    /// The seed nodes, each with the same user and password.
    public private(set) var endpoints: [RedisEndpoint]

    public init(endpoints: [RedisEndpoint]) throws(RedisError) {
        guard let first = endpoints.first else { throw .invalidURL("a Redis Cluster needs at least one node address") }
        for endpoint in endpoints where endpoint.database != 0 {
            throw .invalidURL("Redis Cluster has only database 0; remove /\(endpoint.database) from the URL")
        }
        self.endpoints = endpoints.map { endpoint in
            var endpoint = endpoint
            endpoint.user = first.user
            endpoint.password = first.password
            return endpoint
        }
    }

    /// Parses `redis+cluster://[user[:password]@]host:port,host:port[/]`.
    public init(url: String) throws(RedisError) {
        guard url.hasPrefix(RedisClusterSeeds.scheme) else {
            throw .invalidURL("a Redis Cluster URL looks like redis+cluster://[user@]host:port,host:port/, got \(RedisEndpoint.redact(url))")
        }
        var rest = Substring(url.dropFirst(RedisClusterSeeds.scheme.count))
        var credentials = ""
        if let at = rest.lastIndex(of: "@") {
            credentials = String(rest[...at])
            rest = rest[rest.index(after: at)...]
        }
        var path = ""
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        let hosts = rest.split(separator: ",", omittingEmptySubsequences: false)
        guard hosts.count <= 64 else { throw .invalidURL("a Redis Cluster URL names at most 64 seed nodes, not \(hosts.count)") }
        var endpoints: [RedisEndpoint] = []
        for host in hosts {
            guard !host.isEmpty else { throw .invalidURL("a Redis Cluster URL has an empty node address (two commas, or one at an end)") }
            endpoints.append(try RedisEndpoint(url: "redis://" + credentials + host + path))
        }
        try self.init(endpoints: endpoints)
    }

    /// True when `url` is a `redis+cluster://` URL.
    public static func isClusterURL(_ url: String) -> Bool { url.hasPrefix(scheme) }

    /// The endpoint of a cluster node, with the seeds' credentials.
    public func endpoint(for node: RedisClusterMap.Node) -> RedisEndpoint {
        var endpoint = endpoints[0]
        endpoint.host = node.host
        endpoint.port = node.port
        return endpoint
    }

    /// The URL without any password, for a child process whose password travels apart (in its
    /// environment).
    public var urlWithoutPassword: String {
        var text = RedisClusterSeeds.scheme
        if let user = endpoints[0].user { text += RedisEndpoint.percentEncoded(user) + ":@" }
        return text + endpoints.map { RedisClusterMap.Node(host: $0.host, port: $0.port).description }.joined(separator: ",") + "/"
    }

    /// The seeds with the password shown as `***`.
    public var description: String {
        let first = endpoints[0].description
        guard let schemeEnd = first.firstRange(of: "://") else { return first }
        var text = "redis+cluster://"
        // Credentials (redacted) as the first endpoint shows them, then every host:port.
        let afterScheme = first[schemeEnd.upperBound...]
        if let at = afterScheme.lastIndex(of: "@") { text += afterScheme[...at] }
        text += endpoints.map { RedisClusterMap.Node(host: $0.host, port: $0.port).description }.joined(separator: ",")
        return text + "/"
    }
}
