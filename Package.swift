// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "KQuery",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "KQuery", targets: ["KQuery"]),
        .executable(name: "kquery", targets: ["kquery"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", exact: "2.0.1"),
    ],
    targets: [
        .systemLibrary(name: "CPCRE2", pkgConfig: "libpcre2-8", providers: [.apt(["libpcre2-dev"])]),
        .target(name: "KQuery", dependencies: ["CPCRE2"]),
        .executableTarget(
            name: "kquery",
            dependencies: ["KQuery", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(name: "PredicateFuzz", dependencies: ["KQuery"], path: "Fuzz/PredicateFuzz"),
        .testTarget(
            name: "KQueryTests",
            dependencies: ["KQuery", "kquery", .product(name: "PropertyBased", package: "swift-property-based")],
            resources: [.copy("Fixtures")]
        ),
    ]
)
