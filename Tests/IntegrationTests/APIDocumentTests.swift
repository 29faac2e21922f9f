import Foundation
import HeraldAPI
import Queue
import Testing

extension IntegrationTests {
    /// docs/api.openapi.yaml against the server: the same routes, and every status a route
    /// answers with (provoked here over HTTP, read back from the server's own request metrics)
    /// is documented for it, and every documented status is one the route really gives.
    @Suite
    struct APIDocument {
        /// "METHOD /path" → documented statuses, from the document's `paths` section.
        static func documented(filePath: String = #filePath) throws -> [String: Set<Int>] {
            var repository = filePath as NSString
            for _ in 0..<3 { repository = repository.deletingLastPathComponent as NSString }
            let text = try String(contentsOfFile: repository.appendingPathComponent("docs/api.openapi.yaml"), encoding: .utf8)
            var result: [String: Set<Int>] = [:]
            var inPaths = false
            var path: String?
            var operation: String?
            for line in text.components(separatedBy: "\n") {
                if !line.hasPrefix(" ") && !line.isEmpty {
                    inPaths = line.hasPrefix("paths:")
                    continue
                }
                guard inPaths else { continue }
                if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                    path = String(line.dropFirst(2).dropLast())
                } else if let path, line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":") {
                    let method = line.trimmingCharacters(in: .whitespaces).dropLast().uppercased()
                    operation = "\(method) \(path)"
                    result[operation!] = []
                } else if let operation, line.hasPrefix("        '"), !line.hasPrefix("         ") {
                    let code = line.trimmingCharacters(in: .whitespaces).dropFirst().prefix(3)
                    if let status = Int(code) { result[operation, default: []].insert(status) }
                }
            }
            return result
        }

        @Test
        func theDocumentListsExactlyTheServersRoutes() throws {
            let document = try Self.documented()
            #expect(Set(document.keys) == Set(APIServer.routes))
            #expect(document.values.allSatisfy { !$0.isEmpty })
        }

        @Test
        func everyStatusARouteGivesIsDocumentedAndViceVersa() async throws {
            let document = try Self.documented()
            try await withAPIBed(configure: { $0.maxBatch = 2; $0.redisTimeoutMilliseconds = 3_000 }) { bed in
                let job = #"{"token":"\#(API.tokenA)","payload":{"aps":{"alert":"x"}}}"#
                let none: [(String, String)] = []
                // A key of the wrong type for each Redis command the routes run: Redis refuses (500).
                _ = try await bed.client.send(["SET", QueueKeys(queue: "wrong").jobs, "x"])
                _ = try await bed.client.send(["SET", QueueKeys(queue: "wrong").urgentJobs, "x"])  // the alert's lane
                _ = try await bed.client.send(["SET", QueueKeys(queue: "wrong").dead, "x"])
                _ = try await bed.client.send(["SET", QueueKeys(queue: "wrong").feedback, "x"])
                _ = try await API.addDeadLetter(bed, reason: "bad_priority")
                let requests: [(String, String, String?, [(String, String)]?)] = [
                    ("GET", "/healthz", nil, none), ("GET", "/readyz", nil, none), ("GET", "/metrics", nil, none),
                    ("POST", "/v1/notifications", job, nil),
                    ("POST", "/v1/notifications", "{", nil),
                    ("POST", "/v1/notifications", job, none),
                    ("POST", "/v1/notifications", #"{"notifications":[\#(job),\#(job),\#(job)]}"#, nil),
                    ("POST", "/v1/notifications", #"{"payload":{}}"#, nil),
                    ("POST", "/v1/notifications?queue=wrong", job, nil),
                    ("GET", "/v1/queues/default", nil, nil), ("GET", "/v1/queues/a%20b", nil, nil), ("GET", "/v1/queues/default", nil, none),
                    ("GET", "/v1/queues/wrong", nil, nil),
                    ("GET", "/v1/queues/default/dead-letters", nil, nil), ("GET", "/v1/queues/default/dead-letters?count=x", nil, nil),
                    ("GET", "/v1/queues/default/dead-letters", nil, none), ("GET", "/v1/queues/wrong/dead-letters", nil, nil),
                    ("POST", "/v1/queues/default/dead-letters/requeue", "{}", nil),
                    ("POST", "/v1/queues/default/dead-letters/requeue", "[", nil),
                    ("POST", "/v1/queues/default/dead-letters/requeue", "{}", none),
                    ("POST", "/v1/queues/default/dead-letters/requeue", String(repeating: " ", count: 1_100_000) + "{}", nil),
                    ("POST", "/v1/queues/wrong/dead-letters/requeue", "{}", nil),
                    ("GET", "/v1/queues/default/feedback", nil, nil), ("GET", "/v1/queues/default/feedback?cursor=x", nil, nil),
                    ("GET", "/v1/queues/default/feedback", nil, none), ("GET", "/v1/queues/wrong/feedback", nil, nil),
                ]
                func send(_ request: (String, String, String?, [(String, String)]?)) async throws {
                    if let body = request.2 {
                        _ = try await bed.request(request.0, request.1, json: body, headers: request.3)
                    } else {
                        _ = try await bed.get(request.1, headers: request.3)
                    }
                }
                for request in requests { try await send(request) }
                // Redis gone: 503 from every route that needs it.
                bed.redis.stop()
                for request in requests where request.3 == nil && !request.1.contains("wrong") && !request.1.contains("%20") {
                    try await send(request)
                }
                try await send(("GET", "/readyz", nil, none))

                // Read back what the server answered, by route template, from its own metrics.
                let metrics = try await bed.get("/metrics", headers: none).text
                var observed: [String: Set<Int>] = [:]
                let pattern = try NSRegularExpression(pattern: #"herald_api_requests_total\{route="([^"]+)",method="([A-Z]+)",status="(\d+)"\}"#)
                for match in pattern.matches(in: metrics, range: NSRange(metrics.startIndex..., in: metrics)) {
                    let text = { (index: Int) in String(metrics[Range(match.range(at: index), in: metrics)!]) }
                    let route = text(1) == "unmatched" ? "unmatched" : "\(text(2)) \(text(1))"
                    observed[route, default: []].insert(Int(text(3))!)
                }
                #expect(observed["unmatched"] == nil, "\(observed)")
                for (route, statuses) in observed where route != "unmatched" {
                    let documented = document[route] ?? []
                    #expect(statuses.isSubset(of: documented), "\(route) answered \(statuses.sorted()), documented \(documented.sorted())")
                }
                for (route, statuses) in document {
                    let seen = observed[route] ?? []
                    #expect(statuses.isSubset(of: seen), "\(route) documents \(statuses.sorted()) but answered only \(seen.sorted())")
                }
            }
        }
    }
}
