import ArgumentParser
import KQuery
import KQueryContainer

import Foundation

/// `kquery asset`: the bytes of a record's asset written to a file, and the collection of what
/// assets leave behind.
struct AssetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "asset",
        abstract: "Write a record's asset to a file, or collect unreferenced asset bytes.",
        discussion: """
            Put a file into an asset field with `kquery modify`, `kquery import` or the shell: give the field the \
            value {"$file": "PATH"} (optionally with "contentType").
            """,
        subcommands: [Get.self, Collect.self]
    )

    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write the asset in FIELD of RECORD to a file (or - for standard output).")

        @OptionGroup var target: ContainerDatabaseOptions

        @Option(help: ArgumentHelp("The record's zone.", valueName: "NAME"))
        var zone: String?

        @Option(help: "The element of an asset list (from 0).")
        var index: Int?

        @Option(help: ArgumentHelp("Where to write the bytes (- for standard output).", valueName: "FILE"))
        var out: String

        @Argument(help: "The record's name.")
        var record: String

        @Argument(help: "The asset field.")
        var field: String

        func run() throws {
            let database = try target.open()
            let zoneID = try zone.map(ContainerFiles.zoneID) ?? .default
            let recordID = RecordID(recordName: record, zoneID: zoneID)
            guard let asset = try ContainerFiles.run({ () throws(ContainerError) in try database.asset(recordID, field: field, index: index) }) else {
                // A list without --index is the likely slip: say so rather than "no asset".
                let found = try? database.lookup([recordID]).first
                let listed = if case .saved(let saved)? = found { saved.fields[field]?.assetTexts.count ?? 0 } else { 0 }
                let hint = index == nil && listed > 1 ? ": it holds a list of \(listed) assets, pick one with --index" : ""
                Terminal.writeError("error: NOT_FOUND: record '\(record)' has no asset in field '\(field)'\(index.map { " at \($0)" } ?? "")\(hint)")
                throw ExitCode(1)
            }
            let handle: FileHandle
            if out == "-" {
                handle = .standardOutput
            } else {
                guard FileManager.default.createFile(atPath: out, contents: nil), let opened = FileHandle(forWritingAtPath: out) else {
                    Terminal.writeError("error: \(out): cannot write the file")
                    throw ExitCode(2)
                }
                handle = opened
            }
            defer { if out != "-" { try? handle.close() } }
            try ContainerFiles.run { () throws(ContainerError) in
                do {
                    try database.container.readAsset(asset.contentHash) { chunk in try handle.write(contentsOf: chunk) }
                } catch let error as ContainerError {
                    throw error
                } catch {
                    throw ContainerError(.internalError, "\(out): \(error.localizedDescription)")
                }
            }
            if out != "-" { Terminal.writeError("wrote \(asset.size) bytes to \(out)") }
        }
    }

    struct Collect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove expired uploads, spent receipts and asset bytes no record has referred to for a day.")

        @Option(help: ArgumentHelp("The container file.", valueName: "FILE"))
        var db: String

        func run() throws {
            let container = try ContainerFiles.open(db, identifier: ContainerFiles.defaultIdentifier)
            let collected = try ContainerFiles.run { () throws(ContainerError) in try container.collectAssets() }
            ContainerFiles.print(.object([
                ("blobs", .int(Int64(collected.blobs))), ("bytes", .int(collected.bytes)), ("uploads", .int(Int64(collected.uploads))),
                ("receipts", .int(Int64(collected.receipts))),
            ]))
        }
    }
}
