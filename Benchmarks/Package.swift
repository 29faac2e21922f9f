// swift-tools-version: 6.1
import Foundation
import PackageDescription

/// SwiftPM names a path dependency after its folder (lowercased): `main` here, whatever a clone is
/// called elsewhere.
let herald = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .lastPathComponent.lowercased()

/// Herald's micro-benchmarks (ordo-one package-benchmark): a package of its own so that the main
/// build never compiles the benchmark tooling. Run from this folder:
///   swift package benchmark                       # run and print
///   swift package benchmark thresholds check      # compare with Thresholds/ (non-zero exit on regression)
///   swift package --allow-writing-to-package-directory benchmark thresholds update
let package = Package(
    name: "HeraldBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
        // The MallocInterposer trait gives the malloc counts on Swift 6.3 and later.
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // What the benchmarks and the profile driver share: inputs and the in-memory HTTP/2 pair.
        .target(
            name: "BenchmarkFixtures",
            dependencies: [.product(name: "HeraldCore", package: herald), .product(name: "HeraldWorker", package: herald)],
            path: "Sources/BenchmarkFixtures"),
        .executableTarget(
            name: "HeraldBenchmarks",
            dependencies: [
                "BenchmarkFixtures",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "HeraldCore", package: herald),
                .product(name: "HeraldWorker", package: herald),
            ],
            path: "Benchmarks/HeraldBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // The same pieces with no harness, for callgrind (instructions/op on VMs without
        // hardware counters) and gdb (where an allocation comes from).
        .executableTarget(
            name: "herald-profile",
            dependencies: [
                "BenchmarkFixtures", .product(name: "HeraldCore", package: herald),
                .product(name: "HeraldWorker", package: herald),
            ],
            path: "Sources/herald-profile"),
    ],
    swiftLanguageModes: [.v6]
)
