package bucket

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// classify maps the SDK's errors onto ErrNotFound and ErrPrecondition
// (keeping the original in the chain).
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket":
			return fmt.Errorf("%w: %w", ErrNoBucket, err)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
			return fmt.Errorf("%w: %w", ErrDenied, err)
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case "PreconditionFailed", "ConditionalRequestConflict":
			return fmt.Errorf("%w: %w", ErrPrecondition, err)
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case http.StatusPreconditionFailed, http.StatusConflict:
			return fmt.Errorf("%w: %w", ErrPrecondition, err)
		case http.StatusForbidden:
			return fmt.Errorf("%w: %w", ErrDenied, err)
		}
	}
	return err
}

func md5b64(b []byte) *string {
	s := md5.Sum(b)
	return aws.String(base64.StdEncoding.EncodeToString(s[:]))
}

// Get implements Objects. A body cut short is an error (the SDK's retries
// cover the request; the body is checked against its length here).
func (c *Client) Get(ctx context.Context, key string) ([]byte, string, error) {
	out, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &c.bucket, Key: &key})
	if err != nil {
		return nil, "", fmt.Errorf("bucket: get %s: %w", key, classify(err))
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err == nil && out.ContentLength != nil && int64(len(b)) != *out.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, "", fmt.Errorf("bucket: get %s: reading the body: %w", key, err)
	}
	return b, aws.ToString(out.ETag), nil
}

// Put implements Objects.
func (c *Client) Put(ctx context.Context, key string, data []byte, cond Cond) (string, error) {
	in := &s3.PutObjectInput{Bucket: &c.bucket, Key: &key, Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))), ContentMD5: md5b64(data)}
	if cond.IfNoneMatch != "" {
		in.IfNoneMatch = aws.String(cond.IfNoneMatch)
	}
	if cond.IfMatch != "" {
		in.IfMatch = aws.String(cond.IfMatch)
	}
	out, err := c.s3.PutObject(ctx, in)
	if err != nil {
		return "", fmt.Errorf("bucket: put %s: %w", key, classify(err))
	}
	return aws.ToString(out.ETag), nil
}

// Upload implements Objects: one put up to PartSize, multipart above.
func (c *Client) Upload(ctx context.Context, key string, r io.Reader, size int64) error {
	if size <= c.partSize {
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("bucket: upload %s: reading: %w", key, err)
		}
		_, err := c.Put(ctx, key, b, Cond{})
		return err
	}
	return c.multipart(ctx, key, r, size)
}

// multipart uploads size bytes of r in parts. The object exists only once
// CompleteMultipartUpload succeeds; on any error the upload is aborted (a
// process killed meanwhile leaves an unfinished upload, invisible to
// readers, that AbortUploads removes later).
func (c *Client) multipart(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	cr, err := c.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &c.bucket, Key: &key})
	if err != nil {
		return fmt.Errorf("bucket: upload %s: %w", key, classify(err))
	}
	id := cr.UploadId
	defer func() {
		if err != nil {
			// Aborted even when ctx ended: an unfinished upload costs storage.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, aerr := c.s3.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &c.bucket, Key: &key, UploadId: id}); aerr != nil {
				c.log.Warn("bucket: abort multipart upload", "key", key, "err", aerr)
			}
		}
	}()
	var parts []types.CompletedPart
	buf := make([]byte, c.partSize)
	for n, left := int32(1), size; left > 0; n++ {
		b := buf[:min(left, c.partSize)]
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("bucket: upload %s: reading part %d: %w", key, n, err)
		}
		out, err := c.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: &c.bucket, Key: &key, UploadId: id,
			PartNumber: aws.Int32(n), Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))), ContentMD5: md5b64(b)})
		if err != nil {
			return fmt.Errorf("bucket: upload %s: part %d: %w", key, n, classify(err))
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
		left -= int64(len(b))
	}
	_, err = c.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &c.bucket, Key: &key, UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil {
		return fmt.Errorf("bucket: upload %s: complete: %w", key, classify(err))
	}
	return nil
}

// Open implements Objects.
func (c *Client) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &c.bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("bucket: get %s: %w", key, classify(err))
	}
	return out.Body, nil
}

// Delete implements Objects; a missing key is not an error.
func (c *Client) Delete(ctx context.Context, key string) error {
	if _, err := c.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &c.bucket, Key: &key}); err != nil {
		if err = classify(err); errors.Is(err, ErrNotFound) {
			return nil
		}
		return fmt.Errorf("bucket: delete %s: %w", key, err)
	}
	return nil
}

// List implements Objects.
func (c *Client) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(c.s3, &s3.ListObjectsV2Input{Bucket: &c.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("bucket: list %s: %w", prefix, classify(err))
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size)})
		}
	}
	return out, nil
}

// AbortUploads implements Objects.
func (c *Client) AbortUploads(ctx context.Context, prefix string) (int, error) {
	out, err := c.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &c.bucket, Prefix: &prefix})
	if err != nil {
		return 0, fmt.Errorf("bucket: list multipart uploads: %w", classify(err))
	}
	n := 0
	for _, u := range out.Uploads {
		if _, err := c.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &c.bucket, Key: u.Key, UploadId: u.UploadId}); err != nil {
			return n, fmt.Errorf("bucket: abort upload of %s: %w", aws.ToString(u.Key), classify(err))
		}
		n++
	}
	return n, nil
}
