import KQuery
import KQueryContainer
import KQueryServer
import KQueryWebServices
import Testing

/// The configuration file's `"assets"`: each limit and lifetime read, and a wrong one refused
/// with a message that names it.
@Suite struct AssetConfigurationTests {
    @Test func theConfigurationFileSetsAssetLimits() throws {
        var configuration = ServerConfiguration(dataDirectory: "/tmp/unused")
        try configuration.load(configurationText: """
            {"assets": {"maximumSize": 1048576, "uploadLifetime": 60, "receiptLifetime": 120.5, "gracePeriod": 3600,
                        "downloadLifetime": 300, "collectionInterval": 30}}
            """)
        #expect(configuration.assetPolicy.maximumSize == 1_048_576)
        #expect(configuration.assetPolicy.uploadLifetime == 60_000)
        #expect(configuration.assetPolicy.receiptLifetime == 120_500)
        #expect(configuration.assetPolicy.gracePeriod == 3_600_000)
        #expect(configuration.assetDownloadLifetime == 300)
        #expect(configuration.assetCollectionInterval == .seconds(30))
        // Members left out keep their defaults.
        var partial = ServerConfiguration(dataDirectory: "/tmp/unused")
        try partial.load(configurationText: #"{"assets": {"gracePeriod": 60}}"#)
        #expect(partial.assetPolicy.maximumSize == AssetPolicy().maximumSize && partial.assetDownloadLifetime == 3600)

        let refused: [(String, String)] = [
            (#"{"assets": 5}"#, #""assets" must be an object"#),
            (#"{"assets": {"maximumSize": 0}}"#, #""maximumSize" must be a positive whole number"#),
            (#"{"assets": {"maximumSize": 1.5}}"#, #""maximumSize" must be a positive whole number"#),
            (#"{"assets": {"maximumSize": "50MB"}}"#, #""maximumSize" must be a positive whole number"#),
            (#"{"assets": {"uploadLifetime": -1}}"#, #""uploadLifetime" must be a positive number of seconds"#),
            (#"{"assets": {"receiptLifetime": 0}}"#, #""receiptLifetime" must be a positive number of seconds"#),
            (#"{"assets": {"downloadLifetime": "1h"}}"#, #""downloadLifetime" must be a positive number of seconds"#),
            (#"{"assets": {"collectionInterval": 1e12}}"#, #""collectionInterval" must be a positive number of seconds"#),
            (#"{"assets": {"maxSize": 5}}"#, #""assets" has no member "maxSize""#),
        ]
        for (text, message) in refused {
            var other = ServerConfiguration(dataDirectory: "/tmp/unused")
            do throws(ServerError) {
                try other.load(configurationText: text)
                Issue.record("\(text) was accepted")
            } catch {
                #expect(error.reason.contains(message), "\(text): \(error.reason)")
            }
        }
    }

    /// A server started with the file's limit keeps it: one byte over is 413 at the upload URL.
    @Test func theServerKeepsTheConfiguredSizeLimit() async throws {
        var loaded = true
        try await ServerHarness { configuration in
            do throws(ServerError) { try configuration.load(configurationText: #"{"assets": {"maximumSize": 1000}}"#) } catch { loaded = false }
        }.run { c in
            let url = try await c.uploadURL(database: "public", recordName: "r", field: "f", user: "_alice")
            let over = try await c.fetch(url, method: .post, body: [UInt8](repeating: 7, count: 1001))
            #expect(over.status == 413 && over.json["serverErrorCode"] == .string("QUOTA_EXCEEDED"))
            let fits = try await c.uploadAsset([UInt8](repeating: 7, count: 1000), database: "public", recordName: "r", field: "f", user: "_alice")
            #expect(fits["size"] == .int(1000))
        }
        #expect(loaded)
    }
}
