// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "KQuery",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "KQuery", targets: ["KQuery"]),
        .library(name: "KQueryStore", targets: ["KQueryStore"]),
        .library(name: "KQueryContainer", targets: ["KQueryContainer"]),
        .library(name: "KQueryServer", targets: ["KQueryServer"]),
        .library(name: "KQueryPostgres", targets: ["KQueryPostgres"]),
        .library(name: "KQueryKeyValueStore", targets: ["KQueryKeyValueStore"]),
        .library(name: "KQueryDocuments", targets: ["KQueryDocuments"]),
        .executable(name: "kquery", targets: ["kquery"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", exact: "2.0.1"),
        .package(url: "https://github.com/google/swift-benchmark.git", exact: "0.1.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", exact: "2.8.1"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "3.12.3"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        // Hummingbird's NIO, held at the project's version (it would otherwise resolve to the newest).
        .package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.2"),
        // APNs delivery: an HTTP/2 client over TLS; the tests' fake APNs serves HTTP/2 with a certificate made at test time.
        .package(url: "https://github.com/swift-server/async-http-client.git", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", exact: "1.46.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", exact: "1.21.1"),
        // PostgreSQL as the system of record (SPEC §16), only in KQueryPostgres.
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .systemLibrary(name: "CPCRE2", pkgConfig: "libpcre2-8", providers: [.apt(["libpcre2-dev"])]),
        .systemLibrary(name: "CEditLine", pkgConfig: "libedit", providers: [.apt(["libedit-dev"])]),
        .target(name: "CKQuerySupport"),
        .target(name: "KQuery", dependencies: ["CPCRE2", "CKQuerySupport"]),
        .target(name: "KQueryStore", dependencies: ["KQuery", "CKQuerySupport", .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift")]),
        .target(
            name: "KQueryContainer",
            dependencies: [
                "KQuery", "KQueryStore", "CKQuerySupport", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The PostgreSQL container storage: the only target that links postgres-nio.
        .target(
            name: "KQueryPostgres",
            dependencies: [
                "KQuery", "KQueryStore", "KQueryContainer", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "KQueryWebServices", dependencies: ["KQuery", "KQueryStore", "KQueryContainer"]),
        .target(
            name: "KQueryServer",
            dependencies: [
                "KQuery", "KQueryStore", "KQueryContainer", "KQueryWebServices", "KQueryPostgres", .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            // The console's pages (SPEC §17): plain HTML, CSS and JavaScript modules, no build step.
            resources: [.copy("Console/Pages")]
        ),
        // The client side of the Web Services HTTP API that the client libraries share.
        .target(
            name: "KQueryWebServicesClient",
            dependencies: [
                "KQuery", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"), .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // iCloud key-value storage (SPEC §14): a client library over the container's public API and
        // the Web Services HTTP API.
        .target(
            name: "KQueryKeyValueStore",
            dependencies: ["KQuery", "KQueryContainer", "KQueryWebServicesClient", .product(name: "NIOCore", package: "swift-nio")]
        ),
        // iCloud Documents (SPEC §15): a synced folder over the container's public API and the Web
        // Services HTTP API.
        .target(
            name: "KQueryDocuments",
            dependencies: [
                "KQuery", "KQueryContainer", "KQueryWebServicesClient", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .executableTarget(
            name: "kquery",
            dependencies: [
                "KQuery", "KQueryStore", "KQueryContainer", "KQueryWebServices", "KQueryServer", "KQueryPostgres", "KQueryKeyValueStore", "KQueryDocuments", "CEditLine", "CKQuerySupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "PredicateFuzz", dependencies: ["KQuery"], path: "Fuzz/PredicateFuzz"),
        .executableTarget(
            name: "RequestFuzz", dependencies: ["KQuery", "KQueryStore", "KQueryContainer", "KQueryWebServices"], path: "Fuzz/RequestFuzz"),
        .executableTarget(name: "FileFuzz", dependencies: ["KQuery", "KQueryStore"], path: "Fuzz/FileFuzz"),
        .executableTarget(name: "PlistFuzz", dependencies: ["KQueryKeyValueStore"], path: "Fuzz/PlistFuzz"),
        .executableTarget(
            name: "KQueryBenchmarks",
            dependencies: [
                "KQuery",
                "KQueryStore",
                "CKQuerySupport",
                .product(name: "Benchmark", package: "swift-benchmark"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Benchmarks/KQueryBenchmarks"
        ),
        .executableTarget(
            name: "ContainerBenchmarks", dependencies: ["KQuery", "KQueryStore", "KQueryContainer"], path: "Benchmarks/ContainerBenchmarks"),
        .executableTarget(
            name: "KeyValueStoreBenchmarks", dependencies: ["KQuery", "KQueryContainer", "KQueryKeyValueStore", "KQueryServer"],
            path: "Benchmarks/KeyValueStoreBenchmarks"),
        .executableTarget(
            name: "DocumentsBenchmarks", dependencies: ["KQuery", "KQueryDocuments", "KQueryServer", "KQueryTestSupport"], path: "Benchmarks/DocumentsBenchmarks"),
        // Helpers both test targets share (temporary files removed at exit).
        .target(name: "KQueryTestSupport", dependencies: ["KQuery", "KQueryContainer"], path: "Tests/Support"),
        .testTarget(
            name: "KQueryTests",
            dependencies: [
                "KQueryTestSupport", "KQuery", "KQueryStore", "KQueryContainer", "KQueryPostgres", "KQueryKeyValueStore", "KQueryDocuments", "kquery",
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "KQueryServerTests",
            dependencies: [
                "KQueryTestSupport", "KQuery", "KQueryContainer", "KQueryPostgres", "KQueryWebServices", "KQueryServer", "KQueryKeyValueStore",
                "KQueryDocuments",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"), .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "X509", package: "swift-certificates"),
            ]
        ),
    ]
)
