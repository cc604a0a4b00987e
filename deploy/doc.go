// Package deploy holds the examples for running longhaul past one
// machine: kubernetes/ (the controller as a Job that resumes from the
// bucket on any node, the bucket's Secret, the run's ConfigMap, vLLM as a
// Deployment, the PyTorch trainer under torchrun beside the controller)
// and slurm/ (an sbatch script that requeues on preemption and stops on
// SIGTERM). Its test decodes every manifest strictly into the Kubernetes
// API types and runs the sbatch script's signal handling.
package deploy
