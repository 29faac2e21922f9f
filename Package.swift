// swift-tools-version: 6.1
import PackageDescription

/// Settings every Herald target shares: Swift 6 language mode everywhere.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    // Release builds skip the runtime exclusivity checks: on the per-notification path they cost
    // about a tenth of the worker's CPU (profiled); debug builds, and so every test run, keep them.
    .unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release)),
]

let package = Package(
    name: "Herald",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "herald", targets: ["herald"]),
        // For the micro-benchmark package (Benchmarks/Package.swift), which depends on this one by path.
        .library(name: "HeraldCore", targets: ["APNs", "Queue", "Transport"]),
        // For the fuzz package (Tests/Fuzz/Package.swift): the metrics server's request parsing and
        // the config file parser, beyond what HeraldCore holds.
        .library(name: "HeraldObservability", targets: ["Observability"]),
        // For the benchmarks' end-to-end piece (Benchmarks/): the delivery rules with no I/O.
        .library(name: "HeraldWorker", targets: ["Worker"]),
        .library(name: "HeraldConfig", targets: ["HeraldConfig"]),
    ],
    // Exact versions: two builds of one commit compile the same code. (Package.resolved stays out of
    // git because a mirror may record other commit ids than the public repositories.)
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", exact: "2.4.1"),
        .package(url: "https://github.com/jpsim/Yams", exact: "6.2.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", exact: "0.2.0"),
        // Tests only: random event sequences for the delivery rules' properties.
        .package(url: "https://github.com/x-sheep/swift-property-based", exact: "2.0.1"),
        // `herald api`: the HTTP front door (Sources/HeraldAPI).
        .package(url: "https://github.com/hummingbird-project/hummingbird", exact: "2.28.1"),
        // Already in Hummingbird's graph; named here for NIOPosix (the API's Redis threads) and
        // ServiceLifecycle (graceful shutdown; SIGHUP reloads the token file).
        .package(url: "https://github.com/apple/swift-nio", exact: "2.101.3"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", exact: "2.13.0"),
    ],
    targets: [
        // C libraries from Debian, reached through pkg-config.
        .systemLibrary(
            name: "CNGHTTP2", pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(
            name: "COpenSSL", pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CHiredis", pkgConfig: "hiredis",
            providers: [.apt(["libhiredis-dev"])]),
        // C functions for what Swift cannot import (function-like macros).
        .target(name: "CHeraldShims", dependencies: ["COpenSSL"]),

        // Pure Swift: the APNs model, validation, reasons, outcomes, JWT claims, backoff.
        .target(name: "APNs", swiftSettings: swiftSettings),
        // Event loop, TCP, TLS, HTTP/2 client and server sessions, ES256, Redis.
        .target(
            name: "Transport",
            dependencies: [
                "APNs", "CNGHTTP2", "COpenSSL", "CHiredis", "CHeraldShims",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings),
        // Redis schema: keys, job codec, Lua scripts, retry encoding.
        .target(name: "Queue", dependencies: ["APNs", "Transport"], swiftSettings: swiftSettings),
        // Metrics (swift-metrics → Prometheus text), health endpoints, log formats.
        .target(
            name: "Observability",
            dependencies: [
                "Transport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: swiftSettings),
        // The APNs emulator.
        .target(
            name: "MockAPNs",
            dependencies: [
                "APNs", "Transport", "CHeraldShims", .product(name: "Logging", package: "swift-log"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            swiftSettings: swiftSettings),
        // The queue worker: connection pool, provider tokens, delivery rules, the Redis-fed pipeline.
        .target(
            name: "Worker",
            dependencies: [
                "APNs", "Transport", "Queue", "Observability",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings),
        // The load generator: starts Redis, the emulator and workers, enqueues, measures, reports.
        .target(name: "LoadGen", dependencies: ["APNs", "Transport", "Queue", "Observability", "CHeraldShims"], swiftSettings: swiftSettings),
        // The config file (`herald worker --config`): parsing only, apart from the command line.
        .target(
            name: "HeraldConfig", dependencies: [.product(name: "Yams", package: "Yams")],
            swiftSettings: swiftSettings),
        // `herald api`: HTTP routes over the queue tools (enqueue, stats, dead letters, feedback),
        // bearer-token auth, limits and its own metrics, on Hummingbird.
        .target(
            name: "HeraldAPI",
            dependencies: [
                "APNs", "Queue", "Transport", "Observability",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings),
        // Herald's version (in source) and the git commit it was built from (written at build time
        // by the BuildInfo plugin), for --version, the startup log line and herald_build_info.
        .target(name: "HeraldBuildInfo", swiftSettings: swiftSettings, plugins: ["BuildInfo"]),
        // Runs git on every build and writes the commit into a Swift file (HERALD_COMMIT or
        // "unknown" without a .git, e.g. in a source tarball or a Docker build context).
        .plugin(name: "BuildInfo", capability: .buildTool()),
        .executableTarget(
            name: "herald",
            dependencies: [
                "APNs", "Transport", "MockAPNs", "Queue", "Worker", "Observability", "LoadGen", "HeraldConfig",
                "HeraldAPI", "HeraldBuildInfo",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings),

        // What the test suites share: starting child processes without Foundation's `Process`.
        .target(
            name: "HeraldTestSupport", dependencies: ["CHeraldShims"], path: "Tests/TestSupport",
            swiftSettings: swiftSettings),
        .testTarget(name: "APNsTests", dependencies: ["APNs"], swiftSettings: swiftSettings),
        .testTarget(
            name: "TransportTests", dependencies: ["APNs", "Transport", "COpenSSL", "HeraldTestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "HeraldConfigTests", dependencies: ["HeraldConfig"], swiftSettings: swiftSettings),
        .testTarget(name: "QueueTests", dependencies: ["APNs", "Queue", "CHeraldShims"], swiftSettings: swiftSettings),
        // The delivery rules alone (no Redis, no sockets): property tests over random event sequences.
        .testTarget(
            name: "WorkerTests",
            dependencies: [
                "APNs", "Queue", "Worker",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["APNs", "Transport", "MockAPNs", "Queue", "Worker", "LoadGen", "HeraldAPI", "HeraldBuildInfo",
                           "HeraldTestSupport"],
            swiftSettings: swiftSettings),
    ],
    swiftLanguageModes: [.v6]
)
