// Package bucket is longhaul's client for an S3-compatible bucket: the
// few object operations a mirrored run directory needs (conditional puts,
// streamed uploads that switch to multipart when large, downloads, lists,
// deletes), with retries and backoff for throttling, resets and 5xx, and
// counters of requests and bytes for the cost estimate.
//
// The client is the AWS SDK for Go v2 (github.com/aws/aws-sdk-go-v2), so
// the endpoint, credentials, region and profile are taken exactly as the
// AWS tools take them: AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3),
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
// AWS_REGION, AWS_PROFILE with ~/.aws/config and ~/.aws/credentials, web
// identity (Kubernetes service accounts) and instance roles.
package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Errors in the chain of the client's errors.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("bucket: no such key")
	// ErrPrecondition: a conditional put's condition did not hold (HTTP
	// 412, or 409 for a conflicting concurrent conditional write).
	ErrPrecondition = errors.New("bucket: precondition failed")
	// ErrNoBucket: the bucket does not exist.
	ErrNoBucket = errors.New("bucket: no such bucket (create it first)")
	// ErrDenied: the credentials were refused.
	ErrDenied = errors.New("bucket: access denied (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or the profile)")
)

// Permanent reports errors that waiting does not cure: a missing bucket,
// refused credentials.
func Permanent(err error) bool { return errors.Is(err, ErrNoBucket) || errors.Is(err, ErrDenied) }

// Cond is the condition of a Put.
type Cond struct {
	// IfNoneMatch "*": the key must not exist.
	IfNoneMatch string
	// IfMatch: the key's current ETag must be this one.
	IfMatch string
}

// Object is one listed object.
type Object struct {
	Key  string
	Size int64
}

// Objects is what a mirrored run directory needs of a bucket. *Client is
// the real one; tests of the mirror's own logic may use a fake (and say so).
type Objects interface {
	// Get returns the object and its ETag.
	Get(ctx context.Context, key string) ([]byte, string, error)
	// Put writes a small object under a condition and returns its ETag.
	Put(ctx context.Context, key string, data []byte, c Cond) (string, error)
	// Upload writes size bytes read from r (multipart when large). A cut
	// multipart upload leaves no object.
	Upload(ctx context.Context, key string, r io.Reader, size int64) error
	// Open streams an object.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	Delete(ctx context.Context, key string) error
	// List returns every object whose key starts with prefix.
	List(ctx context.Context, prefix string) ([]Object, error)
	// AbortUploads aborts the unfinished multipart uploads under prefix.
	AbortUploads(ctx context.Context, prefix string) (int, error)
}

// ParseURL splits "s3://BUCKET/PREFIX" into the bucket and the prefix
// (without slashes at either end; it may be empty).
func ParseURL(u string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return "", "", fmt.Errorf("bucket: %q is not an s3:// URL", u)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("bucket: %q names no bucket (want s3://BUCKET/PREFIX)", u)
	}
	return bucket, strings.Trim(prefix, "/"), nil
}

// IsURL reports whether s names a bucket location (s3://...).
func IsURL(s string) bool { return strings.HasPrefix(s, "s3://") }

// Options adjust a Client. The zero value takes everything from the
// environment, as the AWS CLI does.
type Options struct {
	// Endpoint overrides AWS_ENDPOINT_URL (tests point it at a loopback
	// server).
	Endpoint string
	// AccessKey and SecretKey, when set, replace the credential chain.
	AccessKey, SecretKey string
	// PartSize is the size of a multipart upload's parts and the size from
	// which Upload uses multipart (default 16 MiB; S3's minimum is 5 MiB).
	PartSize int64
	// MaxAttempts bounds the SDK's tries of one request (default 6).
	MaxAttempts int
	// HeaderTimeout bounds the wait for a response's headers (default
	// 60 s).
	HeaderTimeout time.Duration
	Logger        *slog.Logger
}

// Client is a bucket. It is safe for concurrent use.
type Client struct {
	s3       *s3.Client
	bucket   string
	partSize int64
	log      *slog.Logger
	stats    *Stats
}

// New returns a client of the named bucket.
func New(ctx context.Context, bucketName string, o Options) (*Client, error) {
	if o.PartSize <= 0 {
		o.PartSize = 16 << 20
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 6
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 60 * time.Second
	}
	stats := &Stats{}
	// The SDK's buildable client, so that AWS_CA_BUNDLE applies as the
	// AWS tools apply it; counted by wrapping it below.
	hc := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 10 * time.Second }).
		WithTransportOptions(func(t *http.Transport) {
			// A server that accepts a request and never answers is an
			// outage, not a wait without end.
			t.ResponseHeaderTimeout = o.HeaderTimeout
		})
	loadOpts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithHTTPClient(hc),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = o.MaxAttempts
				so.MaxBackoff = 5 * time.Second
				// No client-side retry quota: during a long outage the
				// quota would turn every later request into an error
				// without trying; the mirror paces its own retries.
				so.RateLimiter = ratelimit.None
			})
		}),
	}
	if o.AccessKey != "" {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("bucket: AWS configuration: %w", err)
	}
	cfg.HTTPClient = countingClient{cfg.HTTPClient, stats}
	if cfg.Region == "" {
		cfg.Region = "us-east-1" // S3-compatible servers ignore it; SigV4 needs one
	}
	if o.Endpoint != "" {
		cfg.BaseEndpoint = aws.String(o.Endpoint)
	}
	custom := cfg.BaseEndpoint != nil || os.Getenv("AWS_ENDPOINT_URL_S3") != ""
	// The SDK's default CRC trailers (aws-chunked bodies) are not spoken
	// by every S3-compatible server; longhaul checks every object against
	// the SHA-256 its manifest records, and sends Content-MD5 on puts.
	cfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	c := s3.NewFromConfig(cfg, func(so *s3.Options) {
		// Custom endpoints (SeaweedFS, MinIO, R2, a loopback test server)
		// address buckets by path; AWS itself by virtual host.
		so.UsePathStyle = custom
	})
	return &Client{s3: c, bucket: bucketName, partSize: o.PartSize, log: o.Logger, stats: stats}, nil
}

// Bucket is the bucket's name.
func (c *Client) Bucket() string { return c.bucket }

// Stats returns the client's request and byte counters.
func (c *Client) Stats() *Stats { return c.stats }

// EnsureBucket creates the bucket when it does not exist (tests, and a
// first run on a fresh server).
func (c *Client) EnsureBucket(ctx context.Context) error {
	if _, err := c.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &c.bucket}); err == nil {
		return nil
	}
	if _, err := c.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &c.bucket}); err != nil {
		if _, herr := c.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &c.bucket}); herr == nil {
			return nil // created meanwhile
		}
		return fmt.Errorf("bucket: create %s: %w", c.bucket, classify(err))
	}
	return nil
}

// Describe names the endpoint for messages.
func Describe(u string) string {
	ep := os.Getenv("AWS_ENDPOINT_URL_S3")
	if ep == "" {
		ep = os.Getenv("AWS_ENDPOINT_URL")
	}
	if ep == "" {
		return u
	}
	if p, err := url.Parse(ep); err == nil {
		ep = p.Host
	}
	return u + " at " + ep
}
