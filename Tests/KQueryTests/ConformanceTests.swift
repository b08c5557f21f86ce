import Foundation
import KQueryTestSupport
import Testing
@testable import KQuery

/// The public conformance cases (Fixtures/cases.json over Fixtures/restaurants.ndjson), through the
/// library and through the `kquery` binary.
@Suite("Conformance")
struct ConformanceTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var kind: String
        var predicate: String
        var arguments: [String]
        var flags: [String]
        var expected: [String]
        var needsPosition = false
        var testDescription: String { "\(kind): \(predicate) \(flags.joined(separator: " "))" }
    }

    static let cases: [Case] = {
        guard let json = try? Fixtures.json("cases.json") else { return [] }
        var cases: [Case] = []
        func strings(_ value: JSON?) -> [String] {
            guard case .array(let elements)? = value else { return [] }
            return elements.compactMap(\.stringValue)
        }
        if case .array(let rows)? = json["query"] {
            for case .array(let row) in rows where row.count == 3 {
                cases.append(Case(kind: "query", predicate: row[0].stringValue ?? "", arguments: strings(row[1]), flags: [], expected: strings(row[2])))
            }
        }
        if case .array(let rows)? = json["sorted"] {
            for case .array(let row) in rows where row.count == 3 {
                cases.append(Case(kind: "sorted", predicate: row[0].stringValue ?? "", arguments: [], flags: strings(row[1]), expected: strings(row[2])))
            }
        }
        if case .array(let rows)? = json["extended"] {
            for case .array(let row) in rows where row.count == 2 {
                cases.append(Case(kind: "extended", predicate: row[0].stringValue ?? "", arguments: [], flags: ["--profile", "extended"], expected: strings(row[1])))
            }
        }
        if case .array(let rows)? = json["invalid"] {
            for case .array(let row) in rows where row.count == 2 {
                var invalid = Case(kind: "invalid", predicate: row[0].stringValue ?? "", arguments: [], flags: [], expected: [])
                invalid.needsPosition = row[1] == .bool(true)
                cases.append(invalid)
            }
        }
        return cases
    }()

    @Test func casesAreLoaded() {
        #expect(Self.cases.count == 45)
    }

    @Test(arguments: cases)
    func throughTheLibrary(_ testCase: Case) throws {
        let records = try Fixtures.records("restaurants.ndjson")
        let profile: PredicateProfile = testCase.flags.contains("extended") ? .extended : .cloudkit
        let arguments = try testCase.arguments.map { try Constant(json: JSON.parse($0)) }
        if testCase.kind == "invalid" {
            do {
                _ = try ValidatedPredicate(testCase.predicate, arguments: arguments, profile: profile)
                Issue.record("accepted")
            } catch {
                #expect(error.rendered(in: testCase.predicate).contains("^"))
            }
            return
        }
        var descriptors: [KQuery.SortDescriptor] = []
        var limit: Int?
        var flags = testCase.flags[...]
        while let flag = flags.popFirst() {
            let value = flags.popFirst() ?? ""
            switch flag {
            case "--sort":
                let parts = value.split(separator: ":")
                descriptors.append(KQuery.SortDescriptor(String(parts[0]), ascending: parts.count < 2 || parts[1] != "desc"))
            case "--sort-near":
                let parts = value.split(separator: "@")
                let coordinates = parts[1].split(separator: ",").compactMap { Double($0) }
                descriptors.append(KQuery.SortDescriptor(distanceOf: String(parts[0]), from: Location(latitude: coordinates[0], longitude: coordinates[1])))
            case "--limit": limit = Int(value)
            default: break
            }
        }
        let query = Query(
            recordType: "Restaurant", predicate: try ValidatedPredicate(testCase.predicate, arguments: arguments, profile: profile),
            sortDescriptors: descriptors, resultsLimit: limit)
        let names = try query.perform(on: records, now: 0).records.map { $0.recordID.recordName }
        if testCase.kind == "sorted" {
            #expect(names == testCase.expected)
        } else {
            #expect(names.sorted() == testCase.expected.sorted())
        }
    }

    @Test(arguments: cases)
    func throughTheBinary(_ testCase: Case) throws {
        let data = Fixtures.url("restaurants.ndjson").path
        let run = try KQueryBinary.run(
            ["query", "--records", data, "--type", "Restaurant", "--format", "names"] + testCase.flags
                + testCase.arguments.flatMap { ["--arg", $0] } + [testCase.predicate])
        if testCase.kind == "invalid" {
            #expect(run.status == 1)
            #expect(run.standardOutput.isEmpty)
            #expect(run.standardError.contains("^"))
            if testCase.needsPosition { #expect(run.standardError.contains("1:")) }
            return
        }
        #expect(run.status == 0, "\(run.standardError)")
        let names = run.standardOutput.split(separator: "\n").map(String.init)
        #expect(testCase.kind == "sorted" ? names == testCase.expected : names.sorted() == testCase.expected.sorted())
    }
}

/// Runs the built `kquery` executable.
enum KQueryBinary {
    struct Run {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    static var url: URL {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("kquery")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        var directory = Bundle.module.bundleURL
        for _ in 0..<4 {
            directory.deleteLastPathComponent()
            let candidate = directory.appendingPathComponent("kquery")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return Fixtures.repositoryRoot.appendingPathComponent(".build/debug/kquery")
    }

    static func run(_ arguments: [String], input: String? = nil, environment: [String: String] = [:]) throws -> Run {
        let process = SpawnedProcess()
        process.executableURL = url
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["NO_COLOR"] = "1"
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let output = Pipe()
        let error = Pipe()
        let inputPipe = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = inputPipe
        try process.run()
        if let input { inputPipe.fileHandleForWriting.write(Data(input.utf8)) }
        try inputPipe.fileHandleForWriting.close()
        let outData = output.fileHandleForReading.readDataToEndOfFile()
        let errData = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, standardOutput: String(decoding: outData, as: UTF8.self), standardError: String(decoding: errData, as: UTF8.self))
    }
}
