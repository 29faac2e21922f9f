// swift-tools-version: 6.1
import Foundation
import PackageDescription

/// SwiftPM names a path dependency after its folder (lowercased): `main` here, whatever a clone is
/// called elsewhere.
let herald = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().lastPathComponent.lowercased()

/// Herald's libFuzzer targets: a package of its own so that `make test` never builds them. Each
/// target is an executable whose `LLVMFuzzerTestOneInput` feeds one input to one parser that
/// reads what a producer, a peer or an operator controls; seed inputs are in Corpus/<name>/.
/// Built and run by `make fuzz` (see docs/reliability.md):
///   swift build -c release -Xswiftc -enable-testing -sanitize=fuzzer -sanitize=address
///   .build/release/FuzzJobDecoder -max_total_time=60 <a copy of Corpus/job-decoder>
/// `-enable-testing` lets FuzzRedisReply reach the Redis reply tape, which is internal to Transport.
let package = Package(
    name: "HeraldFuzz",
    platforms: [.macOS(.v14)],
    dependencies: [.package(path: "../..")],
    targets: [
        fuzzTarget("FuzzJobDecoder", products: ["HeraldCore"]),
        fuzzTarget("FuzzJSONPayload", products: ["HeraldCore"]),
        fuzzTarget("FuzzAPNsErrorBody", products: ["HeraldCore"]),
        fuzzTarget("FuzzRedisReply", products: ["HeraldCore"]),
        fuzzTarget("FuzzRedisURL", products: ["HeraldCore"]),
        fuzzTarget("FuzzProviderToken", products: ["HeraldCore"]),
        fuzzTarget("FuzzMetricsRequest", products: ["HeraldObservability"]),
        fuzzTarget("FuzzConfigFile", products: ["HeraldConfig"]),
    ],
    swiftLanguageModes: [.v6]
)

/// libFuzzer supplies `main`, so the target's one file is parsed as a library.
func fuzzTarget(_ name: String, products: [String]) -> Target {
    .executableTarget(
        name: name,
        dependencies: products.map { .product(name: $0, package: herald) },
        swiftSettings: [.unsafeFlags(["-parse-as-library"])])
}
