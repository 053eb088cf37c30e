//! The same source gives a byte-identical pack: twice in a row, and from a
//! copy of the tree whose files were created in the opposite order, and
//! from a tar archive of the tree, and whatever the number of threads or
//! the batch size.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use kiln::build::compress::CompressOptions;
use kiln::build::{BuildOptions, build_pack};
use kiln::pack::Encoding;

fn files() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..40 {
        let text = format!(
            "<h1>page {i}</h1>\n{}",
            "<p>lorem ipsum dolor sit amet</p>\n".repeat(i * 3 + 1)
        );
        out.push((format!("dir{}/page{i}.html", i % 5), text.into_bytes()));
        out.push((
            format!("assets/s{i}.css"),
            format!("body{{margin:{i}px}}\n").repeat(30).into_bytes(),
        ));
    }
    out.push(("index.html".into(), b"home".to_vec()));
    out.push(("dup-a.txt".into(), b"same content".repeat(20)));
    out.push(("dup-b.txt".into(), b"same content".repeat(20)));
    out.push(("app/_wildcard.html".into(), b"shell".to_vec()));
    out.push(("404.html".into(), b"missing".repeat(50)));
    out.push(("_headers".into(), b"/*\n  X-A: b\n".to_vec()));
    out.push((
        "_redirects".into(),
        b"/old /index.html 301\n/x/* /y/:splat 302\n".to_vec(),
    ));
    out
}

fn write_tree(root: &Path, files: &[(String, Vec<u8>)]) {
    for (i, (path, content)) in files.iter().enumerate() {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_600_000_000 + i as u64 * 7);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
}

#[test]
fn builds_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let files = files();
    write_tree(&dir.path().join("a"), &files);
    // Same files and mtimes, created in the reverse order (different
    // directory order on disk, different inode numbers).
    let reversed: Vec<_> = files.iter().cloned().enumerate().rev().collect();
    for (i, (path, content)) in reversed {
        let p = dir.path().join("b").join(&path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &content).unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_600_000_000 + i as u64 * 7);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    let opts = BuildOptions {
        compress: CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            ..CompressOptions::default()
        },
        ..BuildOptions::default()
    };
    let mut packs = Vec::new();
    for (src, name) in [("a", "1.pack"), ("a", "2.pack"), ("b", "3.pack")] {
        let out = dir.path().join(name);
        let report = build_pack(&dir.path().join(src), &out, &opts).unwrap();
        assert!(report.dedup_saved > 0, "the duplicate files share a body");
        packs.push(std::fs::read(&out).unwrap());
    }
    assert!(packs[0] == packs[1], "two builds of the same tree differ");
    assert!(
        packs[0] == packs[2],
        "a copy created in another order differs"
    );
}

#[test]
fn a_tar_of_the_tree_gives_the_same_pack() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    write_tree(&tree, &files());
    let tar_path = dir.path().join("tree.tar");
    let mut builder = tar::Builder::new(File::create(&tar_path).unwrap());
    builder.append_dir_all(".", &tree).unwrap();
    builder.into_inner().unwrap();
    let opts = BuildOptions::default();
    build_pack(&tree, &dir.path().join("dir.pack"), &opts).unwrap();
    build_pack(&tar_path, &dir.path().join("tar.pack"), &opts).unwrap();
    let from_dir = std::fs::read(dir.path().join("dir.pack")).unwrap();
    let from_tar = std::fs::read(dir.path().join("tar.pack")).unwrap();
    assert!(from_dir == from_tar, "directory and tar builds differ");
}

#[test]
fn the_thread_count_does_not_change_the_pack() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    write_tree(&tree, &files());
    let opts = BuildOptions::default();
    let mut packs = Vec::new();
    for threads in [1, 3] {
        let out = dir.path().join(format!("{threads}.pack"));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| build_pack(&tree, &out, &opts)).unwrap();
        packs.push(std::fs::read(&out).unwrap());
    }
    assert!(packs[0] == packs[1], "one thread and three threads differ");
}

#[test]
fn the_batch_size_does_not_change_the_pack() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    write_tree(&tree, &files());
    let tar_path = dir.path().join("tree.tar");
    let mut builder = tar::Builder::new(File::create(&tar_path).unwrap());
    builder.append_dir_all(".", &tree).unwrap();
    builder.into_inner().unwrap();
    let mut packs = Vec::new();
    // One file per batch, a few per batch, everything at once; duplicate
    // contents land in different batches and are still stored once.
    for (i, buffer_bytes) in [1, 700, u64::MAX].into_iter().enumerate() {
        let opts = BuildOptions {
            buffer_bytes,
            ..BuildOptions::default()
        };
        for src in [&tree, &tar_path] {
            let out = dir.path().join(format!("{i}.pack"));
            let report = build_pack(src, &out, &opts).unwrap();
            assert!(report.dedup_saved > 0);
            packs.push((std::fs::read(&out).unwrap(), report.dedup_saved));
        }
    }
    for (pack, saved) in &packs[1..] {
        assert!(*pack == packs[0].0, "a batch size changes the pack");
        assert_eq!(*saved, packs[0].1);
    }
}
