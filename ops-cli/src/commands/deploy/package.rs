//! Packaging: the cargo-lambda zips of the handlers, found and hashed
//! before any request (a missing zip is a usage error), go to an artifacts
//! bucket under content-hash keys (`<package>/<sha256>.zip`). Unchanged code
//! keeps its key, so CloudFormation sees no change and does not touch the
//! function; an object already in the bucket is not uploaded again. The
//! template goes to the same bucket when it is too large to send inline.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use aws_sdk_s3::primitives::ByteStream;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::{Config, StackInputs, validate_bucket_name};
use crate::connect;
use crate::error::{self, Error, Result};

/// Each handler package and the template parameter carrying its S3 key.
pub const HANDLERS: [(&str, &str); 4] = [
    ("stream-counter", stack::params::STREAM_COUNTER_CODE_KEY),
    ("dlq-reprocessor", stack::params::DLQ_REPROCESSOR_CODE_KEY),
    ("api", stack::params::API_CODE_KEY),
    ("drift-check", stack::params::DRIFT_CHECK_CODE_KEY),
];

/// CloudFormation's limit for an inline `TemplateBody`, bytes.
pub const INLINE_TEMPLATE_MAX: usize = 51_200;

/// One handler zip: where it came from and where it lives in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    pub package: String,
    pub parameter: String,
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub key: String,
    pub state: ArtifactState,
}

/// Whether a zip had to go to the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactState {
    /// Hashed, the bucket not consulted yet.
    Local,
    /// Uploaded by this run.
    Uploaded,
    /// The bucket already held this content: nothing to upload.
    Present,
    /// Not in the bucket yet; a deploy uploads it (plan only looks).
    Missing,
}

/// The zip of `package` under `dir`, as cargo-lambda lays it out.
pub fn zip_path(dir: &Path, package: &str) -> PathBuf {
    dir.join(package).join("bootstrap.zip")
}

/// The bucket key of a zip: the package, then the content hash.
pub fn artifact_key(package: &str, sha256: &str) -> String {
    format!("{package}/{sha256}.zip")
}

/// `<stack-name>-artifacts-<account>-<region>`, lowercased (bucket names
/// are), checked against S3's naming rules.
pub fn bucket_name(stack_name: &str, account: &str, region: &str) -> Result<String> {
    let name = format!("{}-artifacts-{account}-{region}", stack_name.to_ascii_lowercase());
    validate_bucket_name(&name)?;
    Ok(name)
}

/// Lowercase hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().fold(String::with_capacity(64), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// Hashes the file at `path` and returns (sha256, size), streaming it.
pub fn hash_file(path: &Path) -> Result<(String, u64)> {
    let mut file = std::fs::File::open(path).map_err(Error::io("cannot open", path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let read = file.read(&mut buffer).map_err(Error::io("cannot read", path))?;
        if read == 0 {
            break;
        }
        size += read as u64;
        hasher.update(&buffer[..read]);
    }
    Ok((hex(&hasher.finalize()), size))
}

/// Finds and hashes every handler zip under `dir`; a missing one is an
/// error telling the operator to build first. No I/O beyond the files.
pub fn locate(dir: &Path) -> Result<Vec<Artifact>> {
    HANDLERS
        .iter()
        .map(|(package, parameter)| {
            let path = zip_path(dir, package);
            if !path.is_file() {
                return Err(Error::MissingArtifact {
                    package: (*package).to_owned(),
                    path,
                });
            }
            let (sha256, size) = hash_file(&path)?;
            Ok(Artifact {
                package: (*package).to_owned(),
                parameter: (*parameter).to_owned(),
                key: artifact_key(package, &sha256),
                path,
                sha256,
                size,
                state: ArtifactState::Local,
            })
        })
        .collect()
}

/// Creates `bucket` unless it exists (and is ours). Returns whether it was
/// created.
pub async fn ensure_bucket(s3: &aws_sdk_s3::Client, bucket: &str, region: &str) -> Result<bool> {
    match s3.head_bucket().bucket(bucket).send().await {
        Ok(_) => return Ok(false),
        Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => {}
        Err(err) if error::error_code(&err) == Some("Forbidden") || status_of(&err) == Some(403) => {
            return Err(Error::Aws {
                action: "HeadBucket",
                message: format!(
                    "the bucket {bucket} exists but this account cannot use it (S3 bucket names are global); \
                     pass --artifacts-bucket with another name"
                ),
            });
        }
        Err(err) if status_of(&err) == Some(404) => {}
        Err(err) => return Err(error::aws("HeadBucket")(err)),
    }
    let mut create = s3.create_bucket().bucket(bucket);
    // us-east-1 is the one region that refuses an explicit location.
    if region != "us-east-1" {
        create = create.create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(region))
                .build(),
        );
    }
    match create.send().await {
        Ok(_) => Ok(true),
        // A concurrent deploy created it between the two calls.
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_bucket_already_owned_by_you()) =>
        {
            Ok(false)
        }
        Err(err) => Err(error::aws("CreateBucket")(err)),
    }
}

fn status_of<E>(
    err: &aws_smithy_runtime_api::client::result::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}

/// Whether `key` is already in `bucket`.
pub async fn object_exists(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<bool> {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => Ok(true),
        Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) || status_of(&err) == Some(404) => {
            Ok(false)
        }
        Err(err) => Err(error::aws("HeadObject")(err)),
    }
}

/// Marks each artifact present or missing in `bucket` (a missing bucket
/// holds nothing), without uploading.
pub async fn check(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    bucket_exists: bool,
    artifacts: &mut [Artifact],
) -> Result<()> {
    for artifact in artifacts.iter_mut() {
        artifact.state = if bucket_exists && object_exists(s3, bucket, &artifact.key).await? {
            ArtifactState::Present
        } else {
            ArtifactState::Missing
        };
    }
    Ok(())
}

/// Whether `bucket` exists (and this account may use it).
pub async fn bucket_exists(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<bool> {
    match s3.head_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(true),
        Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) || status_of(&err) == Some(404) => {
            Ok(false)
        }
        Err(err) => Err(error::aws("HeadBucket")(err)),
    }
}

/// Uploads each artifact whose key is not in the bucket yet.
pub async fn upload(s3: &aws_sdk_s3::Client, bucket: &str, artifacts: &mut [Artifact]) -> Result<()> {
    for artifact in artifacts.iter_mut() {
        if object_exists(s3, bucket, &artifact.key).await? {
            artifact.state = ArtifactState::Present;
            continue;
        }
        let body = ByteStream::from_path(&artifact.path).await.map_err(|e| Error::Io {
            action: "cannot read",
            path: artifact.path.clone(),
            source: std::io::Error::other(e),
        })?;
        s3.put_object()
            .bucket(bucket)
            .key(&artifact.key)
            .content_type("application/zip")
            .body(body)
            .send()
            .await
            .map_err(error::aws("PutObject"))?;
        artifact.state = ArtifactState::Uploaded;
    }
    Ok(())
}

/// Uploads a template too large to send inline; returns its key.
pub async fn upload_template(s3: &aws_sdk_s3::Client, bucket: &str, body: &str) -> Result<String> {
    let key = format!("templates/{}.yaml", sha256_hex(body.as_bytes()));
    if !object_exists(s3, bucket, &key).await? {
        s3.put_object()
            .bucket(bucket)
            .key(&key)
            .content_type("application/x-yaml")
            .body(ByteStream::from(body.as_bytes().to_vec()))
            .send()
            .await
            .map_err(error::aws("PutObject"))?;
    }
    Ok(key)
}

/// The URL CloudFormation reads a template object from: path-style on an
/// emulator endpoint, virtual-hosted on AWS.
pub fn template_url(endpoint: Option<&str>, bucket: &str, region: &str, key: &str) -> String {
    match endpoint {
        Some(endpoint) => format!("{}/{bucket}/{key}", endpoint.trim_end_matches('/')),
        None => format!("https://{bucket}.s3.{region}.amazonaws.com/{key}"),
    }
}

/// The handler zips' directory: `--artifacts-dir`, else cargo-lambda's
/// output under the target directory (`CARGO_TARGET_DIR` or the
/// workspace's `target/`).
pub fn artifacts_dir(config: &Config, inputs: &StackInputs, workspace: Option<&Path>) -> PathBuf {
    if let Some(dir) = &inputs.artifacts_dir {
        return dir.clone();
    }
    let base = workspace.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let target = match &config.env.cargo_target_dir {
        Some(dir) if dir.is_absolute() => dir.clone(),
        Some(dir) => base.join(dir),
        None => base.join("target"),
    };
    target.join("lambda")
}

/// Finds and hashes the handler zips: the first thing plan and deploy do,
/// before any request (a missing zip is a usage error, exit 2).
pub fn locate_artifacts(config: &Config, inputs: &StackInputs) -> Result<Vec<Artifact>> {
    locate(&artifacts_dir(config, inputs, connect::workspace_root().as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_package_then_content_hash() {
        let sha = sha256_hex(b"zip bytes");
        assert_eq!(sha.len(), 64);
        assert_eq!(artifact_key("api", &sha), format!("api/{sha}.zip"));
        // The same content always gets the same key: unchanged code is not redeployed.
        assert_eq!(sha256_hex(b"zip bytes"), sha);
        assert_ne!(sha256_hex(b"other bytes"), sha);
    }

    #[test]
    fn sha256_matches_the_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn hashing_a_file_streams_the_same_digest() {
        let dir = std::env::temp_dir().join(format!("ops-cli-hash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        let content = vec![7u8; 200_000];
        std::fs::write(&path, &content).unwrap();
        assert_eq!(hash_file(&path).unwrap(), (sha256_hex(&content), 200_000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_zip_says_to_build_first() {
        let err = locate(Path::new("/nonexistent/lambda")).unwrap_err();
        assert!(matches!(&err, Error::MissingArtifact { package, .. } if package == "stream-counter"));
        assert!(err.to_string().contains("make build"), "{err}");
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        assert_eq!(
            bucket_name("Hybrid-Counter", "000000000000", "us-east-1").unwrap(),
            "hybrid-counter-artifacts-000000000000-us-east-1"
        );
        let err = bucket_name(&"s".repeat(40), "123456789012", "ap-southeast-2").unwrap_err();
        assert!(err.to_string().contains("S3 allows 3 to 63"), "{err}");
        assert!(validate_bucket_name("my_bucket").is_err());
        assert!(validate_bucket_name("-bucket").is_err());
        assert!(validate_bucket_name("a..b").is_err());
        assert!(validate_bucket_name("my.bucket-1").is_ok());
    }

    #[test]
    fn template_urls_are_path_style_on_an_endpoint() {
        assert_eq!(
            template_url(Some("http://127.0.0.1:4566/"), "b", "us-east-1", "templates/x.yaml"),
            "http://127.0.0.1:4566/b/templates/x.yaml"
        );
        assert_eq!(
            template_url(None, "b", "eu-west-1", "templates/x.yaml"),
            "https://b.s3.eu-west-1.amazonaws.com/templates/x.yaml"
        );
    }

    #[test]
    fn the_artifacts_dir_defaults_to_cargo_lambdas_output() {
        let argv = [
            "counterctl",
            "--region",
            "",
            "--endpoint-url",
            "",
            "--profile",
            "",
            "status",
        ];
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        let mut config = Config::from_cli(cli, &|_| None).unwrap();
        let inputs = StackInputs::default();
        assert_eq!(
            artifacts_dir(&config, &inputs, Some(Path::new("/ws"))),
            PathBuf::from("/ws/target/lambda")
        );
        config.env.cargo_target_dir = Some(PathBuf::from("/tmp/t"));
        assert_eq!(
            artifacts_dir(&config, &inputs, Some(Path::new("/ws"))),
            PathBuf::from("/tmp/t/lambda")
        );
        let explicit = StackInputs {
            artifacts_dir: Some(PathBuf::from("/zips")),
            ..StackInputs::default()
        };
        assert_eq!(artifacts_dir(&config, &explicit, None), PathBuf::from("/zips"));
    }
}
