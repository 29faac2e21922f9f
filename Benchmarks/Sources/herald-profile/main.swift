import APNs
import BenchmarkFixtures
import Glibc
import Queue
@_spi(Benchmarks) import Transport

// Runs one of the micro-benchmarked pieces N times with no benchmark harness (no interposers,
// no threads), so that valgrind's callgrind can count its instructions on machines whose VM
// exposes no hardware counters, and gdb can attribute its mallocs:
//   herald-profile <piece> <count>      pieces: decode validate headers classify200 classify410
//                                                stableid roundtrip200 roundtrip410
//                                                endtoend endtoend-fanout endtoend-collapse
//                                                endtoend-reply (endtoend from XREADGROUP's RESP bytes)
// The measured region is the function `measured(_:_:)`: pass
// `--toggle-collect='*herald_profile8measured*'` to callgrind and divide by count.

@inline(never)
func measured(_ count: Int, _ body: () -> Void) {
    for _ in 0..<count { body() }
}

@inline(never)
func keep<T>(_ value: T) { withExtendedLifetime(value) {} }

// Locals of a function, not top-level globals: those carry main-actor checks on every access.
func run() throws {
    let arguments = CommandLine.arguments
    guard arguments.count == 3, let count = Int(arguments[2]) else {
        print("usage: herald-profile <decode|validate|headers|classify200|classify410|stableid|roundtrip200|roundtrip410|endtoend|endtoend-fanout|endtoend-collapse|endtoend-reply> <count>")
        exit(2)
    }
    switch arguments[1] {
    case "decode":
        measured(count) { keep(JobDecoder.decode(entryID: Fixtures.entryID, fields: Fixtures.jobFields, defaults: Fixtures.jobDefaults)) }
    case "validate":
        let notification = Fixtures.notification
        measured(count) { keep(try? notification.validate()) }
    case "headers":
        let builder = RequestHeaderBuilder(authority: "api.push.apple.com")
        let notification = Fixtures.notification
        let authorization = Fixtures.authorization
        measured(count) { keep(builder.withHeaders(for: notification, authorization: authorization) { _, count in count }) }
    case "classify200":
        let body: [UInt8] = []
        var status = 200
        withUnsafeMutablePointer(to: &status) { keep($0) }
        measured(count) { keep(body.withUnsafeBytes { ResponseClassifier.classify(status: status, body: $0) }) }
    case "classify410":
        let body = Fixtures.body410
        measured(count) { keep(body.withUnsafeBytes { ResponseClassifier.classify(status: 410, body: $0) }) }
    case "stableid":
        measured(count) { keep(StableID.apnsID(origin: Fixtures.origin, token: Fixtures.token)) }
    case "roundtrip200", "roundtrip410":
        let pair = arguments[1] == "roundtrip200"
            ? try InMemoryPair(status: 200)
            : try InMemoryPair(status: 410, body: #"{"reason":"Unregistered","timestamp":1717171717171}"#)
        let request = PendingRequest(notification: Fixtures.notification, context: 7)
        pair.send(2_000, request)
        measured(1) { pair.send(count, request) }
        print("completed \(pair.completed), accepted \(pair.accepted), other \(pair.other)")
    case "endtoend", "endtoend-fanout", "endtoend-collapse", "endtoend-reply":
        let pipeline = arguments[1] == "endtoend-fanout"
            ? try EndToEnd(jobs: 100, tokensPerJob: 10)
            : try EndToEnd(jobs: 1000, tokensPerJob: 1, collapseID: arguments[1] == "endtoend-collapse",
                           fromReply: arguments[1] == "endtoend-reply")
        pipeline.run(3 * pipeline.notificationsPerRound)
        var done = 0
        measured(1) { done = pipeline.run(count) }
        print("notifications \(done), accepted \(pipeline.accepted), other \(pipeline.other), batches \(pipeline.batches), RESP bytes \(pipeline.batchBytes)")
    default:
        print("unknown piece \(arguments[1])")
        exit(2)
    }
}

try run()
