import APNs
import Foundation
import Glibc
import HeraldAPI
import Logging
import Queue
import Synchronization
import Testing
import Transport

extension IntegrationTests {
    /// `herald api` over real HTTP (a plain socket client) against a private redis-server.
    @Suite
    struct API {
        static let tokenA = "aabbccdd" + String(repeating: "01", count: 28)
        static let tokenB = "bbccddee" + String(repeating: "23", count: 28)
        static let payload = #"{"aps":{"alert":"Hi"}}"#

        @Test
        func oneJobAndABatchAreEnqueuedWithTheirIDs() async throws {
            try await withAPIBed { bed in
                let one = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload),"priority":5}"#)
                #expect(one.status == 202, "\(one)")
                let oneIDs = try #require(one.json["ids"] as? [String])
                #expect(oneIDs.count == 1)
                #expect(one.json["replayed"] as? Bool == false)

                let batch = try await bed.request("POST", "/v1/notifications", json: """
                    {"notifications":[
                      {"token":"\(Self.tokenA)","payload":{"aps":{"alert":"one"}},"collapse_id":"c1"},
                      {"tokens":["\(Self.tokenA)","\(Self.tokenB)"],"payload":"{\\"aps\\":{\\"alert\\":\\"two\\"}}","push_type":"alert"},
                      {"token":"\(Self.tokenB)","payload":{"aps":{"alert":"three"}},"expiration":"0","topic":"com.example.app"}
                    ]}
                    """)
                #expect(batch.status == 202, "\(batch)")
                let batchIDs = try #require(batch.json["ids"] as? [String])
                #expect(batchIDs.count == 3)

                let entries = try await bed.client.laneEntries(QueueKeys())
                #expect(entries.map(\.id) == oneIDs + batchIDs)
                // The fields a worker reads, as `herald enqueue` writes them: payload text kept byte for byte.
                #expect(entries[0]["token"] == Self.tokenA)
                #expect(entries[0]["payload"] == Self.payload)
                #expect(entries[0]["priority"] == "5")
                #expect(entries[1]["payload"] == #"{"aps":{"alert":"one"}}"#)
                #expect(entries[1]["collapse_id"] == "c1")
                #expect(entries[2]["tokens"] == "\(Self.tokenA),\(Self.tokenB)")
                #expect(entries[2]["payload"] == #"{"aps":{"alert":"two"}}"#)
                #expect(entries[3]["expiration"] == "0")
                #expect(entries[3]["topic"] == "com.example.app")

                // The queue from the query string, or from the body; not both differently.
                let other = try await bed.request("POST", "/v1/notifications?queue=other", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(other.status == 202 && other.json["stream"] as? String == "herald:{other}:jobs:urgent", "an alert at APNs' default priority goes to the urgent lane: \(other)")
                let inBody = try await bed.request("POST", "/v1/notifications", json: #"{"queue":"other","notifications":[{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}]}"#)
                #expect(inBody.status == 202, "\(inBody)")
                #expect(try await bed.client.laneLength(QueueKeys(queue: "other")) == 2)
                let clash = try await bed.request("POST", "/v1/notifications?queue=a", json: #"{"queue":"b","token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(clash.status == 400, "\(clash)")
                let badQueue = try await bed.request("POST", "/v1/notifications?queue=a%7Bb%7D", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(badQueue.status == 400, "\(badQueue)")
                #expect(try await bed.client.laneLength(QueueKeys()) == 4)
            }
        }

        @Test
        func invalidJobsAreRefusedByIndexAndNothingIsEnqueued() async throws {
            try await withAPIBed { bed in
                let notJSON = try await bed.request("POST", "/v1/notifications", json: #"{"token": "#)
                #expect(notJSON.status == 400, "\(notJSON)")
                #expect((notJSON.json["error"] as? [String: Any])?["code"] as? String == "malformed_request")
                let array = try await bed.request("POST", "/v1/notifications", json: "[]")
                #expect(array.status == 400, "\(array)")
                let empty = try await bed.request("POST", "/v1/notifications", json: #"{"notifications":[]}"#)
                #expect(empty.status == 400, "\(empty)")
                let deep = try await bed.request("POST", "/v1/notifications", json: String(repeating: "[", count: 100_000))
                #expect(deep.status == 400 && deep.text.contains("nested too deeply"), "\(deep)")
                let stray = try await bed.request("POST", "/v1/notifications", json: #"{"notifications":[],"token":"x"}"#)
                #expect(stray.status == 400, "\(stray)")

                let batch = try await bed.request("POST", "/v1/notifications", json: """
                    {"notifications":[
                      {"token":"\(Self.tokenA)","payload":\(Self.payload)},
                      {"token":"\(Self.tokenA)","payload":\(Self.payload),"priority":7},
                      {"payload":\(Self.payload)},
                      {"token":"\(Self.tokenA)","payload":\(Self.payload),"colour":"red","attempts":"3"},
                      {"token":"zz","payload":\(Self.payload)},
                      {"token":"\(Self.tokenA)","payload":"{not json"},
                      {"token":"\(Self.tokenA)","payload":\(Self.payload),"priority":[10]},
                      42
                    ]}
                    """)
                #expect(batch.status == 422, "\(batch)")
                #expect((batch.json["error"] as? [String: Any])?["code"] as? String == "invalid_notifications")
                let invalid = try #require(batch.json["invalid"] as? [[String: Any]])
                let byIndex = Dictionary(uniqueKeysWithValues: invalid.map { entry in
                    (entry["index"] as? Int ?? -1, ((entry["reasons"] as? [[String: Any]]) ?? []).compactMap { $0["code"] as? String })
                })
                #expect(byIndex[0] == nil, "the valid job is not listed")
                #expect(byIndex[1] == ["bad_priority"])
                #expect(byIndex[2] == ["missing_token"])
                #expect(byIndex[3] == ["unknown_field", "reserved_field"])
                #expect(byIndex[4]?.count == 1)
                #expect(byIndex[5] == ["malformed_json"] || byIndex[5]?.count == 1, "\(byIndex[5] ?? [])")
                #expect(byIndex[6] == ["bad_field_type"])
                #expect(byIndex[7] == ["not_an_object"])
                // All or nothing: the valid first job was not added either.
                #expect(try await bed.client.laneLength(QueueKeys()) == 0)

                let single = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload),"push_type":"shout"}"#)
                #expect(single.status == 422, "\(single)")
                #expect(single.text.contains("unknown_push_type"))
                #expect(try await bed.client.laneLength(QueueKeys()) == 0)
            }
        }

        @Test
        func everyV1RouteNeedsAValidBearerToken() async throws {
            try await withAPIBed { bed in
                let routes: [(String, String)] = [
                    ("POST", "/v1/notifications"), ("GET", "/v1/queues/default"), ("GET", "/v1/queues/default/dead-letters"),
                    ("POST", "/v1/queues/default/dead-letters/requeue"), ("GET", "/v1/queues/default/feedback"),
                ]
                for (method, path) in routes {
                    let none = try await httpRequest(port: bed.port, method, path, json: "{}")
                    #expect(none.status == 401, "\(method) \(path): \(none)")
                    #expect(none.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
                    let wrong = try await httpRequest(port: bed.port, method, path, headers: [("Authorization", "Bearer not-the-token-0123456789")], json: "{}")
                    #expect(wrong.status == 401, "\(method) \(path): \(wrong)")
                    let basic = try await httpRequest(port: bed.port, method, path, headers: [("Authorization", "Basic \(APIBed.token)")], json: "{}")
                    #expect(basic.status == 401, "\(method) \(path): \(basic)")
                    #expect(!none.text.contains(APIBed.token) && !wrong.text.contains("not-the-token"))
                }
                #expect(try await bed.client.laneLength(QueueKeys()) == 0)
                // Health, readiness and metrics need none.
                #expect(try await bed.get("/healthz", headers: []).status == 200)
                #expect(try await bed.get("/readyz", headers: []).status == 200)
                #expect(try await bed.get("/metrics", headers: []).status == 200)

                // A new token file takes effect without a restart; the old token stops working.
                let newToken = "rotated-token-" + String(repeating: "b2", count: 16)
                try "\(newToken)\n".write(toFile: bed.tokensFile + ".new", atomically: false, encoding: .utf8)
                #expect(rename(bed.tokensFile + ".new", bed.tokensFile) == 0)
                try await waitFor("the rotated token is accepted", timeout: .seconds(20)) {
                    try await bed.get("/v1/queues/default", headers: [("Authorization", "Bearer \(newToken)")]).status == 200
                }
                #expect(try await bed.get("/v1/queues/default").status == 401)
                // An unusable file (no token) keeps the tokens in force.
                try "# nothing\n".write(toFile: bed.tokensFile, atomically: true, encoding: .utf8)
                try await waitFor("the bad file's reload was refused", timeout: .seconds(20)) {
                    try await bed.get("/metrics", headers: []).text.contains("herald_api_token_reload_failures_total 1")
                }
                #expect(try await bed.get("/v1/queues/default", headers: [("Authorization", "Bearer \(newToken)")]).status == 200)
            }
        }

        @Test
        func bodiesAndBatchesOverTheLimitsGet413() async throws {
            try await withAPIBed(configure: { $0.maxBodyBytes = 4096; $0.maxBatch = 3 }) { bed in
                let big = String(repeating: "x", count: 5000)
                let tooBig = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":{"aps":{"alert":"\#(big)"}}}"#)
                #expect(tooBig.status == 413, "\(tooBig)")
                #expect((tooBig.json["error"] as? [String: Any])?["code"] as? String == "body_too_large")
                #expect(tooBig.text.contains("4096"))

                let job = #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#
                let four = try await bed.request("POST", "/v1/notifications", json: #"{"notifications":[\#(job),\#(job),\#(job),\#(job)]}"#)
                #expect(four.status == 413, "\(four)")
                #expect((four.json["error"] as? [String: Any])?["code"] as? String == "batch_too_large")
                let three = try await bed.request("POST", "/v1/notifications", json: #"{"notifications":[\#(job),\#(job),\#(job)]}"#)
                #expect(three.status == 202, "\(three)")

                // A body larger than its Content-Length claims is cut there; one sent without a
                // length (chunked) is counted as it arrives.
                let chunkedBody = String(repeating: " ", count: 6000) + job
                let connection = try HTTPTestConnection(port: bed.port)
                var head = "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer \(APIBed.token)\r\nTransfer-Encoding: chunked\r\n\r\n"
                head += String(chunkedBody.utf8.count, radix: 16) + "\r\n" + chunkedBody + "\r\n0\r\n\r\n"
                try connection.send(Array(head.utf8))
                let chunked = try connection.readResponse()
                #expect(chunked.status == 413, "\(chunked)")
                #expect(try await bed.client.laneLength(QueueKeys()) == 3)
            }
        }

        @Test
        func aClientThatStallsMidRequestIsDisconnected() async throws {
            try await withAPIBed(configure: { $0.idleTimeoutSeconds = 1 }) { bed in
                let stalled = try HTTPTestConnection(port: bed.port)
                try stalled.send(Array("POST /v1/notifications HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"tok".utf8))
                // The server closes it (recv sees the end, or at most a 408/400 answer first) within the deadline.
                let closed = try await waitFor("the server closes the stalled connection", timeout: .seconds(20)) {
                    var byte: UInt8 = 0
                    let n = recv(stalled.fd, &byte, 1, Int32(MSG_DONTWAIT))
                    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                        || (n == 1 && (try? stalled.readResponse()) != nil)
                }
                #expect(closed)
                #expect(try await bed.get("/healthz", headers: []).status == 200, "the server serves others meanwhile")
                #expect(try await bed.client.laneLength(QueueKeys()) == 0)
            }
        }

        @Test
        func requestsBeyondTheConcurrencyLimitGet503Busy() async throws {
            try await withAPIBed(configure: { $0.maxConcurrentRequests = 2 }) { bed in
                let held = try [HTTPTestConnection(port: bed.port), HTTPTestConnection(port: bed.port)]
                // Two requests in flight, each waiting for the rest of its body.
                for connection in held {
                    try connection.send(HTTPTestConnection.head("POST", "/v1/notifications", headers: bed.auth, bodyLength: 10) + Array("{\"a".utf8))
                }
                try await waitFor("both requests are in flight", timeout: .seconds(20)) {
                    try await bed.get("/metrics", headers: []).text.contains("herald_api_requests_in_flight 3")
                }
                let third = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(third.status == 503, "\(third)")
                #expect((third.json["error"] as? [String: Any])?["code"] as? String == "busy")
                #expect(try await bed.get("/healthz", headers: []).status == 200, "health is not limited")
                // One finishes: room again.
                try held[0].send(Array("\"}       ".utf8))
                _ = try held[0].readResponse()
                let fourth = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(fourth.status == 202, "\(fourth)")
                #expect(try await bed.client.laneLength(QueueKeys()) == 1)
            }
        }

        @Test
        func aRetryWithTheSameIdempotencyKeyEnqueuesOnce() async throws {
            try await withAPIBed { bed in
                let body = #"{"notifications":[{"token":"\#(Self.tokenA)","payload":\#(Self.payload)},{"token":"\#(Self.tokenB)","payload":\#(Self.payload)}]}"#
                let key = [("Idempotency-Key", "order-4711")]
                let first = try await bed.request("POST", "/v1/notifications", json: body, headers: bed.auth + key)
                #expect(first.status == 202, "\(first)")
                let again = try await bed.request("POST", "/v1/notifications", json: body, headers: bed.auth + key)
                #expect(again.status == 202, "\(again)")
                #expect(again.json["ids"] as? [String] == first.json["ids"] as? [String])
                #expect(again.json["replayed"] as? Bool == true)
                #expect(again.header("Idempotent-Replayed") == "true")
                #expect(try await bed.client.laneLength(QueueKeys()) == 2, "one set of entries")

                // The same jobs written differently (member order, whitespace, an escaped name): the same request.
                let reordered = """
                    { "notifications" : [ { "payload" : \(Self.payload) , "\\u0074oken" : "\(Self.tokenA)" },
                                          { "payload" : \(Self.payload), "token" : "\(Self.tokenB)" } ] }
                    """
                let rewritten = try await bed.request("POST", "/v1/notifications", json: reordered, headers: bed.auth + key)
                #expect(rewritten.status == 202 && rewritten.json["replayed"] as? Bool == true, "\(rewritten)")
                #expect(rewritten.json["ids"] as? [String] == first.json["ids"] as? [String])

                // The same key for other jobs: refused, nothing added.
                let other = #"{"token":"\#(Self.tokenA)","payload":{"aps":{"alert":"other"}}}"#
                let reused = try await bed.request("POST", "/v1/notifications", json: other, headers: bed.auth + key)
                #expect(reused.status == 422, "\(reused)")
                #expect((reused.json["error"] as? [String: Any])?["code"] as? String == "idempotency_key_reused")
                #expect(try await bed.client.laneLength(QueueKeys()) == 2)

                // The key lives in the queue's slot, with a time to live.
                let ttl = try await bed.client.integer("PTTL", "herald:{default}:idempotency:order-4711")
                #expect(ttl > 0 && ttl <= 86_400_000)
                // Keys are per queue, and a bad key is refused.
                let elsewhere = try await bed.request("POST", "/v1/notifications?queue=eu", json: body, headers: bed.auth + key)
                #expect(elsewhere.status == 202 && elsewhere.json["replayed"] as? Bool == false, "\(elsewhere)")
                let badKey = try await bed.request("POST", "/v1/notifications", json: body, headers: bed.auth + [("Idempotency-Key", "has space")])
                #expect(badKey.status == 400, "\(badKey)")

                // A key costs Redis one short run per millisecond, not every id; its replay still lists every id.
                let big = "{\"notifications\":[" + (0..<500).map { index in
                    #"{"token":"\#(WorkerHarness.deviceToken(index))","payload":\#(Self.payload)}"#
                }.joined(separator: ",") + "]}"
                let bigKey = bed.auth + [("Idempotency-Key", "big-500")]
                let bigFirst = try await bed.request("POST", "/v1/notifications?queue=big", json: big, headers: bigKey)
                let bigAgain = try await bed.request("POST", "/v1/notifications?queue=big", json: big, headers: bigKey)
                #expect(bigFirst.status == 202 && bigAgain.status == 202, "\(bigFirst) \(bigAgain)")
                let bigIDs = try #require(bigFirst.json["ids"] as? [String])
                #expect(bigIDs.count == 500)
                #expect(bigAgain.json["ids"] as? [String] == bigIDs && bigAgain.json["replayed"] as? Bool == true)
                #expect(try await bed.client.laneEntries(QueueKeys(queue: "big")).map(\.id) == bigIDs)
                // One run per millisecond the script took, not 500 ids of about 16 bytes each.
                #expect(try await bed.client.integer("STRLEN", "herald:{big}:idempotency:big-500") < 1_000)

                // Concurrent retries of one key: one set of entries, every answer the same ids.
                let concurrentKey = [("Idempotency-Key", "burst-1")]
                let answers = try await withThrowingTaskGroup(of: HTTPTestResponse.self) { group in
                    for _ in 0..<8 { group.addTask { try await bed.request("POST", "/v1/notifications?queue=burst", json: body, headers: bed.auth + concurrentKey) } }
                    var all: [HTTPTestResponse] = []
                    for try await answer in group { all.append(answer) }
                    return all
                }
                #expect(answers.allSatisfy { $0.status == 202 })
                #expect(Set(answers.map { ($0.json["ids"] as? [String]) ?? [] }).count == 1)
                #expect(answers.filter { $0.json["replayed"] as? Bool == false }.count == 1)
                #expect(try await bed.client.laneLength(QueueKeys(queue: "burst")) == 2)
            }
        }

        /// Adds a dead letter shaped as the worker writes it; its id.
        static func addDeadLetter(_ bed: APIBed, queue: String = "default", reason: String, token: String = tokenA, priority: String? = nil) async throws -> String {
            var fields = ["XADD", QueueKeys(queue: queue).dead, "*", "token", token, "payload", payload, "topic", "com.example.herald"]
            if let priority { fields += ["priority", priority] }
            fields += ["reason", reason, "message", "test \(reason)", "status", "400", "attempts", "1", "failed_at", "1700000000000"]
            let reply = try await bed.client.send(fields)
            return try #require(reply.string)
        }

        @Test
        func queueRoutesPageThroughStatsDeadLettersAndFeedback() async throws {
            try await withAPIBed { bed in
                let stats0 = try await bed.get("/v1/queues/default")
                #expect(stats0.status == 200, "\(stats0)")
                #expect(stats0.json["depth"] as? Int == 0)
                #expect(stats0.json["group"] is NSNull)

                var ids: [String] = []
                for index in 0..<5 {
                    ids.append(try await Self.addDeadLetter(bed, reason: index % 2 == 0 ? "BadDeviceToken" : "bad_priority",
                                                            priority: index % 2 == 0 ? nil : "7"))
                }
                _ = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                let stats = try await bed.get("/v1/queues/default")
                // The alert went to the urgent lane (priority 10 by default): its depth is under "urgent".
                let urgentDepth = (stats.json["urgent"] as? [String: Any])?["depth"] as? Int
                #expect(stats.json["depth"] as? Int == 0 && urgentDepth == 1 && stats.json["dead_letters"] as? Int == 5, "\(stats)")

                // Pages of two: every id once, in order, then no cursor.
                var seen: [String] = []
                var cursor: String? = nil
                var pages = 0
                repeat {
                    let page = try await bed.get("/v1/queues/default/dead-letters?count=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
                    #expect(page.status == 200, "\(page)")
                    let letters = try #require(page.json["dead_letters"] as? [[String: Any]])
                    seen += letters.compactMap { $0["id"] as? String }
                    cursor = page.json["next_cursor"] as? String
                    pages += 1
                    #expect(page.json["total"] as? Int == 5)
                    // Tokens redacted unless asked.
                    #expect(!page.text.contains(Self.tokenA))
                } while cursor != nil && pages < 10
                #expect(seen == ids)
                #expect(pages == 3)
                let full = try await bed.get("/v1/queues/default/dead-letters?reason=bad_priority&show_tokens=true&full=true")
                let filtered = try #require(full.json["dead_letters"] as? [[String: Any]])
                #expect(filtered.compactMap { $0["id"] as? String } == [ids[1], ids[3]])
                #expect(full.text.contains(Self.tokenA))
                #expect(try await bed.get("/v1/queues/default/dead-letters?count=0").status == 400)
                #expect(try await bed.get("/v1/queues/default/dead-letters?full=").status == 400, "a flag is true or false")
                #expect(try await bed.get("/v1/queues/default/dead-letters?cursor=yesterday").status == 400)
                #expect(try await bed.get("/v1/queues/bad%20name").status == 400)

                // Requeue by reason: the two BadDeviceToken letters of the first three.
                let requeue = try await bed.request("POST", "/v1/queues/default/dead-letters/requeue", json: #"{"reasons":["BadDeviceToken"],"limit":2}"#)
                #expect(requeue.status == 200, "\(requeue)")
                #expect(requeue.json["requeued"] as? Int == 2)
                #expect(requeue.json["more"] as? Bool == true)
                let items = try #require(requeue.json["items"] as? [[String: Any]])
                #expect(items.compactMap { $0["id"] as? String } == [ids[0], ids[2]])
                #expect(try await bed.client.laneLength(QueueKeys()) == 3)
                #expect(try await bed.client.integer("XLEN", QueueKeys().dead) == 3)
                // By id: a still-invalid job goes back, marked as such; an unknown id is named.
                let byID = try await bed.request("POST", "/v1/queues/default/dead-letters/requeue", json: #"{"ids":["\#(ids[1])","1-1"]}"#)
                #expect(byID.status == 200, "\(byID)")
                #expect((byID.json["items"] as? [[String: Any]])?.first?["still_invalid"] as? String == "bad_priority")
                #expect(byID.json["missing"] as? [String] == ["1-1"])
                #expect(try await bed.request("POST", "/v1/queues/default/dead-letters/requeue", json: #"{"limit":"all"}"#).status == 400)

                // Feedback: the newest N without a cursor; then everything after a cursor.
                for index in 0..<4 {
                    _ = try await bed.client.send(["XADD", QueueKeys().feedback, "*", "token", index % 2 == 0 ? Self.tokenA : Self.tokenB,
                                                   "topic", "com.example.herald", "reason", "Unregistered", "timestamp", "1700000000000", "job", "1-\(index)"])
                }
                let newest = try await bed.get("/v1/queues/default/feedback?count=3&show_tokens=true")
                #expect(newest.status == 200, "\(newest)")
                let newestEntries = try #require(newest.json["entries"] as? [[String: Any]])
                #expect(newestEntries.compactMap { $0["job"] as? String } == ["1-1", "1-2", "1-3"])
                #expect(newestEntries.first?["token"] as? String == Self.tokenB)
                let fromStart = try await bed.get("/v1/queues/default/feedback?cursor=0&count=2")
                let firstTwo = try #require(fromStart.json["entries"] as? [[String: Any]])
                #expect(firstTwo.compactMap { $0["job"] as? String } == ["1-0", "1-1"])
                #expect(firstTwo.first?["token"] as? String == "aabbccdd…", "redacted by default")
                let next = try #require(fromStart.json["next_cursor"] as? String)
                let rest = try await bed.get("/v1/queues/default/feedback?cursor=\(next)&count=10")
                #expect((rest.json["entries"] as? [[String: Any]])?.compactMap { $0["job"] as? String } == ["1-2", "1-3"])
                let after = try #require(rest.json["next_cursor"] as? String)
                let none = try await bed.get("/v1/queues/default/feedback?cursor=\(after)")
                #expect(none.json["count"] as? Int == 0 && none.json["next_cursor"] as? String == after)
            }
        }

        @Test
        func readinessFollowsRedisAndRequestsGet503WhileItIsGone() async throws {
            try await withAPIBed(configure: { $0.redisTimeoutMilliseconds = 3_000 }) { bed in
                #expect(try await bed.get("/readyz", headers: []).status == 200)
                bed.redis.stop()
                let down = try await bed.get("/readyz", headers: [])
                #expect(down.status == 503, "\(down)")
                #expect((down.json["error"] as? [String: Any])?["code"] as? String == "redis_unavailable")
                let post = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(post.status == 503, "\(post)")
                #expect(post.header("Retry-After") == "1")
                #expect(try await bed.get("/healthz", headers: []).status == 200, "alive while Redis is away")
                try bed.redis.start()
                try await waitFor("the API is ready again", timeout: .seconds(30)) {
                    try await bed.get("/readyz", headers: []).status == 200
                }
                let again = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(again.status == 202, "\(again)")
            }
        }

        /// A Redis that stops answering (SIGSTOP): the request gets 503 after the Redis timeout, the
        /// API keeps serving, and a retry with the same Idempotency-Key after Redis is back adds
        /// the jobs exactly once, whether or not the stalled script ran when Redis resumed.
        @Test
        func aStalledRedisGets503AndAnIdempotentRetryAddsTheJobsOnce() async throws {
            try await withAPIBed(configure: { $0.redisTimeoutMilliseconds = 1_500 }) { bed in
                let body = #"{"notifications":[{"token":"\#(Self.tokenA)","payload":\#(Self.payload)},{"token":"\#(Self.tokenB)","payload":\#(Self.payload)}]}"#
                let key = bed.auth + [("Idempotency-Key", "stall-1")]
                #expect(try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#).status == 202)
                let pid = try #require(bed.redis.pid)
                kill(pid, SIGSTOP)
                let stalled = try await bed.request("POST", "/v1/notifications", json: body, headers: key)
                #expect(stalled.status == 503, "\(stalled)")
                #expect(stalled.text.contains("Idempotency-Key"), "the message says how to retry safely")
                #expect(try await bed.get("/healthz", headers: []).status == 200)
                kill(pid, SIGCONT)
                var retry = HTTPTestResponse(status: 0, headers: [], body: [])
                try await waitFor("a retry succeeds once Redis answers again", timeout: .seconds(30)) {
                    retry = try await bed.request("POST", "/v1/notifications", json: body, headers: key)
                    return retry.status == 202
                }
                #expect((retry.json["ids"] as? [String])?.count == 2)
                #expect(try await bed.client.laneLength(QueueKeys()) == 3, "1 before the stall + the batch exactly once")
            }
        }

        /// Found by schemathesis: a Redis connection idle for longer than the time a request may
        /// wait for Redis timed out its next command at once (the event loop's clock was stale).
        @Test
        func aRedisConnectionIdleLongerThanItsTimeoutStillWaitsForTheAnswer() async throws {
            try await withAPIBed(configure: { $0.redisConnections = 1 }) { bed in
                #expect(try await bed.get("/readyz", headers: []).status == 200)
                // The idle gap is the condition under test (longer than /readyz's 2 s), not a wait for an event.
                try await Task.sleep(for: .milliseconds(2_500))
                let ready = try await bed.get("/readyz", headers: [])
                #expect(ready.status == 200, "\(ready)")
                try await Task.sleep(for: .milliseconds(2_500))
                let post = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                #expect(post.status == 202, "\(post)")
            }
        }

        @Test
        func metricsCountRequestsByRouteTemplateAndStatus() async throws {
            try await withAPIBed { bed in
                _ = try await bed.request("POST", "/v1/notifications", json: #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#)
                _ = try await bed.request("POST", "/v1/notifications", json: "nope")
                _ = try await bed.get("/v1/queues/alpha")
                _ = try await bed.get("/v1/queues/beta")
                _ = try await bed.get("/no/such/route/\(UUID().uuidString)")
                // A known path with a method it does not take: 405 and the methods it does.
                let wrongMethod = try await httpRequest(port: bed.port, "DELETE", "/v1/queues/x/dead-letters", headers: bed.auth)
                #expect(wrongMethod.status == 405 && wrongMethod.header("Allow") == "GET", "\(wrongMethod)")
                #expect(try await httpRequest(port: bed.port, "GET", "/v1/notifications", headers: bed.auth).header("Allow") == "POST")
                let metrics = try await bed.get("/metrics", headers: []).text
                #expect(metrics.contains(#"herald_api_requests_total{route="/v1/notifications",method="POST",status="202"} 1"#), "\(metrics)")
                #expect(metrics.contains(#"herald_api_requests_total{route="/v1/notifications",method="POST",status="400"} 1"#))
                #expect(metrics.contains(#"herald_api_requests_total{route="/v1/queues/{queue}",method="GET",status="200"} 2"#))
                #expect(metrics.contains(#"herald_api_requests_total{route="unmatched",method="GET",status="404"} 1"#))
                #expect(metrics.contains(#"herald_api_requests_total{route="unmatched",method="DELETE",status="405"} 1"#))
                #expect(metrics.contains(#"herald_api_notifications_enqueued_total{queue="default"} 1"#))
                #expect(metrics.contains(#"herald_api_request_duration_seconds_count{route="/v1/notifications"} 2"#))
                #expect(!metrics.contains(APIBed.token))
                #expect(metrics.contains("process_resident_memory_bytes ") && metrics.contains("process_cpu_seconds_total "), "the standard process metrics")
            }
        }

        @Test
        func shutdownFinishesTheRequestInFlight() async throws {
            let bed = try await APIBed()
            let job = #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#
            let body = Array(job.utf8)
            let connection = try HTTPTestConnection(port: bed.port)
            try connection.send(HTTPTestConnection.head("POST", "/v1/notifications", headers: bed.auth, bodyLength: body.count) + body.prefix(10))
            // The server has the request's head (its handler is waiting for the body) when shutdown starts.
            try await waitFor("the request is in flight", timeout: .seconds(20)) {
                try await bed.get("/metrics", headers: []).text.contains("herald_api_requests_in_flight 2")
            }
            await bed.server.shutdown()
            try connection.send(Array(body.dropFirst(10)))
            let response = try connection.readResponse()
            #expect(response.status == 202, "\(response)")
            #expect(await bed.waitForExit() == nil)
            #expect(try await bed.client.laneLength(QueueKeys()) == 1)
            #expect(throws: (any Error).self) { _ = try HTTPTestConnection(port: bed.port) }
            bed.client.shutdown()
        }

        /// The real binary: refuses to start without a usable token file, reloads tokens on SIGHUP,
        /// finishes in-flight work and exits 0 on SIGTERM, and never logs a token.
        @Test
        func theBinaryReloadsTokensOnSIGHUPAndExitsZeroOnSIGTERM() async throws {
            let redis = try RedisServer()
            let directory = try TemporaryDirectory(prefix: "herald-api-process")
            let tokensFile = directory.path("tokens")
            let first = "first-token-" + String(repeating: "c3", count: 16)
            let second = "other-token-" + String(repeating: "d4", count: 16)
            let missing = try APIProcess(redis: redis, tokensFile: directory.path("no-such-file"), directory: directory)
            let missingStatus = try await missing.waitForExit(timeout: .seconds(30))
            #expect(missingStatus != nil && missingStatus != 0)
            #expect(missing.log.contains("cannot read the API token file") && missing.log.contains("--tokens-file"), "\(missing.log)")
            try "short\n".write(toFile: tokensFile, atomically: true, encoding: .utf8)
            let refused = try APIProcess(redis: redis, tokensFile: tokensFile, directory: directory)
            let status = try await refused.waitForExit(timeout: .seconds(30))
            #expect(status != nil && status != 0, "a usage or configuration error's exit status")
            #expect(refused.log.contains("shorter than 16 characters"), "\(refused.log)")

            try "\(first)\n".write(toFile: tokensFile, atomically: true, encoding: .utf8)
            let api = try APIProcess(redis: redis, tokensFile: tokensFile, directory: directory)
            try await api.waitUntilServing()
            let job = #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#
            let accepted = try await httpRequest(port: api.port, "POST", "/v1/notifications", headers: [("Authorization", "Bearer \(first)")], json: job)
            #expect(accepted.status == 202, "\(accepted)")

            // Rewrite the file in place with a token of the same length and put its times back,
            // so only SIGHUP (not the change check) can make the server read it again.
            var before = stat()
            #expect(stat(tokensFile, &before) == 0)
            let handle = try #require(FileHandle(forWritingAtPath: tokensFile))
            try handle.write(contentsOf: Data("\(second)\n".utf8))
            try handle.close()
            var times = [before.st_atim, before.st_mtim]
            #expect(utimensat(AT_FDCWD, tokensFile, &times, 0) == 0)
            api.signal(SIGHUP)
            try await waitFor("the token from the rewritten file is accepted after SIGHUP", timeout: .seconds(20)) {
                try await httpRequest(port: api.port, "GET", "/v1/queues/default", headers: [("Authorization", "Bearer \(second)")]).status == 200
            }
            #expect(try await httpRequest(port: api.port, "GET", "/v1/queues/default", headers: [("Authorization", "Bearer \(first)")]).status == 401)

            api.signal(SIGTERM)
            #expect(try await api.waitForExit(timeout: .seconds(30)) == 0, "\(api.log)")
            #expect(!api.log.contains(first) && !api.log.contains(second), "tokens never reach the log")
            #expect(api.log.contains("SIGHUP"), "\(api.log)")
            let client = try RedisClient(endpoint: redis.endpoint)
            #expect(try await client.laneLength(QueueKeys()) == 1)
            client.shutdown()
        }

        /// With Sentinel the API asks the sentinels for the master, and again after it lost its
        /// connection: a failover costs the requests in flight, and the next ones reach the new master.
        @Test
        func withSentinelTheAPIFollowsAFailover() async throws {
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup()
            let directory = try TemporaryDirectory(prefix: "herald-api-sentinel")
            let tokensFile = directory.path("tokens")
            try "\(APIBed.token)\n".write(toFile: tokensFile, atomically: true, encoding: .utf8)
            var configuration = APIConfiguration(redis: try SentinelConfiguration.masterEndpoint(url: nil), tokensFile: tokensFile)
            configuration.sentinel = group.configuration
            configuration.host = "127.0.0.1"
            configuration.port = 0
            configuration.redisTimeoutMilliseconds = 2_000
            let server = APIServer(configuration: configuration, tokens: try BearerTokens(path: tokensFile), logger: Logger(label: "herald.it.api"))
            let bound = Mutex(0)
            let task = Task { try await server.run(gracefulShutdownSignals: []) { port in bound.withLock { $0 = port } } }
            defer { task.cancel() }
            try await waitFor("the API listens", timeout: .seconds(30)) { bound.withLock { $0 } != 0 }
            let port = bound.withLock { $0 }
            let auth = [("Authorization", "Bearer \(APIBed.token)")]
            let job = #"{"token":"\#(Self.tokenA)","payload":\#(Self.payload)}"#

            let before = try await httpRequest(port: port, "POST", "/v1/notifications", headers: auth, json: job)
            #expect(before.status == 202, "\(before)")
            let oldMaster = group.servers[0].port
            group.server(port: oldMaster)?.kill()
            let newMaster = try await group.waitForFailover(from: oldMaster)
            var after = HTTPTestResponse(status: 0, headers: [], body: [])
            try await waitFor("a POST reaches the new master", timeout: .seconds(60)) {
                after = try await httpRequest(port: port, "POST", "/v1/notifications", headers: auth, json: job)
                return after.status == 202
            }
            let id = try #require((after.json["ids"] as? [String])?.first)
            let client = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: newMaster))
            #expect(try await client.laneEntries(QueueKeys()).contains { $0.id == id }, "the job is on the new master")
            #expect(try await httpRequest(port: port, "GET", "/readyz").status == 200)
            client.shutdown()
            await server.shutdown()
            _ = await task.result
        }

        @Test
        func aWorkerDeliversEveryJobTheAPIEnqueued() async throws {
            let bed = try await WorkerBed(appendOnly: false) { _ in }
            let api = try await APIBed(redis: bed.redis)
            do {
                try await bed.startWorker()
                // 10 batches of 100 single-token jobs, and one fan-out job with 3 tokens, one of them not hex.
                var enqueued = 0
                for batch in 0..<10 {
                    let jobs = (0..<100).map { index in
                        #"{"token":"\#(WorkerHarness.deviceToken(batch * 100 + index))","payload":\#(WorkerHarness.payload(batch * 100 + index))}"#
                    }
                    let response = try await api.request("POST", "/v1/notifications", json: #"{"notifications":[\#(jobs.joined(separator: ","))]}"#)
                    #expect(response.status == 202, "\(response)")
                    enqueued += (response.json["ids"] as? [String])?.count ?? 0
                }
                let fanOut = try await api.request("POST", "/v1/notifications", json: """
                    {"tokens":["\(WorkerHarness.deviceToken(5000))","\(WorkerHarness.deviceToken(5001))","not-hex"],"payload":{"aps":{"alert":"fan"}}}
                    """)
                // A fan-out job with a bad token is refused whole by the API, as `herald enqueue` refuses it.
                #expect(fanOut.status == 422, "\(fanOut)")
                let good = try await api.request("POST", "/v1/notifications", json: """
                    {"tokens":["\(WorkerHarness.deviceToken(5000))","\(WorkerHarness.deviceToken(5001))"],"payload":{"aps":{"alert":"fan"}}}
                    """)
                #expect(good.status == 202, "\(good)")
                #expect(enqueued == 1000)
                let ledger = try await bed.waitUntilSettled(enqueued: enqueued + 2)
                #expect(ledger.acceptedUnique == 1002, "\(ledger)")
                #expect(ledger.duplicates == 0 && ledger.deadLettered == 0 && ledger.feedback == 0, "\(ledger)")
            } catch {
                await api.close()
                await bed.close()
                throw error
            }
            await api.close()
            await bed.close()
        }
    }
}
