//! The paths of a job's files: where a member is read from and what its copy asks for.

use bftp_core::{DestCommand, JobSpec};
use bftp_ftp::CopyRequest;

/// `dir/name`, or `name` for the login directory.
pub fn join_path(dir: &str, name: &str) -> String {
    match dir {
        "" => name.to_string(),
        d if d.ends_with('/') => format!("{d}{name}"),
        d => format!("{d}/{name}"),
    }
}

/// The source path of a member: the job's source directory and the member's name.
pub fn source_path(spec: &JobSpec, name: &str) -> String {
    if spec.recursive {
        join_path(spec.source_root(), name)
    } else if spec.is_multi_file() {
        join_path(spec.source.dir(), name)
    } else {
        spec.source.path.clone()
    }
}

/// What to copy for one member. The destination path names a directory when the job is a
/// multi-file job, when it is empty or ends with `/`, and always for `unique` (STOU takes
/// no name); otherwise it is the file name itself.
pub fn copy_request(spec: &JobSpec, name: &str) -> CopyRequest {
    let dst = spec
        .destination
        .as_ref()
        .map(|d| d.path.as_str())
        .unwrap_or("");
    let is_dir = spec.is_multi_file() || dst.is_empty() || dst.ends_with('/');
    let dest_path = match spec.dest_command {
        DestCommand::Unique if is_dir => dst.trim_end_matches('/').to_string(),
        DestCommand::Unique => dst.to_string(),
        _ if is_dir => join_path(dst, name),
        _ => dst.to_string(),
    };
    CopyRequest {
        source_path: source_path(spec, name),
        dest_path,
        dest_command: spec.dest_command,
        source_size: None,
        announce: None,
        resume_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::{Disposition, Endpoint, FtpParams, RetryPolicy, Timestamp};

    fn spec(src: &str, dst: &str, cmd: DestCommand) -> JobSpec {
        let ep = |p: &str| Endpoint {
            host: "h".into(),
            port: 21,
            user: "u".into(),
            password: None,
            acct: None,
            path: p.into(),
            tls: Default::default(),
        };
        JobSpec {
            source: ep(src),
            destination: Some(ep(dst)),
            disposition: Disposition::Copy,
            dest_command: cmd,
            params: FtpParams::default(),
            start_at: Timestamp(0),
            retry: RetryPolicy::default(),
            notify: vec![],
            keyword: None,
            proof: None,
            recursive: false,
            data_path: None,
        }
    }

    #[test]
    fn member_paths_table() {
        use DestCommand::*;
        let cases = [
            (
                "pub/a.bin",
                "in/",
                Replace,
                "a.bin",
                "pub/a.bin",
                "in/a.bin",
            ),
            ("pub/a.bin", "", Replace, "a.bin", "pub/a.bin", "a.bin"),
            (
                "pub/a.bin",
                "in/b.bin",
                Replace,
                "a.bin",
                "pub/a.bin",
                "in/b.bin",
            ),
            ("pub/*.bin", "in", Append, "x.bin", "pub/x.bin", "in/x.bin"),
            (
                "*.bin",
                "/abs/in/",
                Replace,
                "x.bin",
                "x.bin",
                "/abs/in/x.bin",
            ),
            ("/srv/*.bin", "in/", Unique, "x.bin", "/srv/x.bin", "in"),
            ("a.bin", "in", Unique, "a.bin", "a.bin", "in"),
        ];
        for (src, dst, cmd, name, want_src, want_dst) in cases {
            let r = copy_request(&spec(src, dst, cmd), name);
            assert_eq!(
                (r.source_path.as_str(), r.dest_path.as_str()),
                (want_src, want_dst),
                "{src} -> {dst} ({cmd:?})"
            );
        }
    }
}
