import Foundation
import KQueryTestSupport
import Testing

/// The console in a real browser: `Tests/Console/browser.py` drives headless Chromium through
/// Selenium against a `kquery serve` started here on 127.0.0.1, and saves a screenshot of each page
/// to `.build/console-screenshots/`. Without Chromium, ChromeDriver or Selenium it fails (run
/// `scripts/bootstrap`); it never skips.
@Suite(.serialized) struct ConsoleBrowserTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theConsoleInABrowser() async throws {
        let directory = TemporaryFiles.path("kquery-console-browser")
        let (server, port) = try ServerProcessTests.startServer(directory: directory)
        defer { ServerProcessTests.stop(server) }
        let script = SpawnedProcess()
        script.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        script.arguments = [
            "python3", Self.packageRoot.appendingPathComponent("Tests/Console/browser.py").path, "http://127.0.0.1:\(port)",
            Self.packageRoot.appendingPathComponent(".build/console-screenshots").path,
        ]
        let output = Pipe()
        script.standardOutput = output
        script.standardError = output
        try script.run()
        // Minutes of a browser: waited for off the concurrency pool, which the other tests' servers need.
        let text = try await offThePool {
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            script.waitUntilExit()
            return text
        }
        #expect(script.terminationStatus == 0, "\(text)")
        #expect(text.contains("browser: all checks passed"), "\(text)")
    }
}
