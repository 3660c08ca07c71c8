#include <immintrin.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include <sys/mman.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void rd(const float*W,const float*x,float*y,int N,int K){
  #pragma omp parallel
  { int t=omp_get_thread_num(),T=omp_get_num_threads(); size_t n=(size_t)N*K, a=n*t/T/16*16, b=n*(t+1)/T/16*16;
    __m512 s0=_mm512_setzero_ps(),s1=s0,s2=s0,s3=s0;
    for(size_t i=a;i+64<=b;i+=64){s0=_mm512_add_ps(s0,_mm512_loadu_ps(W+i));s1=_mm512_add_ps(s1,_mm512_loadu_ps(W+i+16));s2=_mm512_add_ps(s2,_mm512_loadu_ps(W+i+32));s3=_mm512_add_ps(s3,_mm512_loadu_ps(W+i+48));}
    y[t]=_mm512_reduce_add_ps(s0+s1+s2+s3);}
}
static void g1(const float*W,const float*x,float*y,int N,int K){
  #pragma omp parallel for schedule(static)
  for(int n=0;n<N;n++){const float*r=W+(size_t)n*K;__m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;int k=0;
    for(;k+64<=K;k+=64){a0=_mm512_fmadd_ps(_mm512_loadu_ps(r+k),_mm512_loadu_ps(x+k),a0);a1=_mm512_fmadd_ps(_mm512_loadu_ps(r+k+16),_mm512_loadu_ps(x+k+16),a1);a2=_mm512_fmadd_ps(_mm512_loadu_ps(r+k+32),_mm512_loadu_ps(x+k+32),a2);a3=_mm512_fmadd_ps(_mm512_loadu_ps(r+k+48),_mm512_loadu_ps(x+k+48),a3);}
    for(;k<K;k+=16)a0=_mm512_fmadd_ps(_mm512_loadu_ps(r+k),_mm512_loadu_ps(x+k),a0);
    y[n]=_mm512_reduce_add_ps(a0+a1+a2+a3);}
}
#define PF 1024
static void g1p(const float*W,const float*x,float*y,int N,int K){
  #pragma omp parallel for schedule(static)
  for(int n=0;n<N;n++){const float*r=W+(size_t)n*K;__m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;int k=0;
    for(;k+64<=K;k+=64){_mm_prefetch((const char*)(r+k+PF),_MM_HINT_T0);_mm_prefetch((const char*)(r+k+PF+16),_MM_HINT_T0);_mm_prefetch((const char*)(r+k+PF+32),_MM_HINT_T0);_mm_prefetch((const char*)(r+k+PF+48),_MM_HINT_T0);
      a0=_mm512_fmadd_ps(_mm512_loadu_ps(r+k),_mm512_loadu_ps(x+k),a0);a1=_mm512_fmadd_ps(_mm512_loadu_ps(r+k+16),_mm512_loadu_ps(x+k+16),a1);a2=_mm512_fmadd_ps(_mm512_loadu_ps(r+k+32),_mm512_loadu_ps(x+k+32),a2);a3=_mm512_fmadd_ps(_mm512_loadu_ps(r+k+48),_mm512_loadu_ps(x+k+48),a3);}
    for(;k<K;k+=16)a0=_mm512_fmadd_ps(_mm512_loadu_ps(r+k),_mm512_loadu_ps(x+k),a0);
    y[n]=_mm512_reduce_add_ps(a0+a1+a2+a3);}
}
static void g4(const float*W,const float*x,float*y,int N,int K){
  #pragma omp parallel for schedule(static)
  for(int n=0;n<N;n+=4){__m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;const float*r0=W+(size_t)n*K,*r1=r0+K,*r2=r1+K,*r3=r2+K;
    for(int k=0;k<K;k+=16){__m512 xv=_mm512_loadu_ps(x+k);a0=_mm512_fmadd_ps(_mm512_loadu_ps(r0+k),xv,a0);a1=_mm512_fmadd_ps(_mm512_loadu_ps(r1+k),xv,a1);a2=_mm512_fmadd_ps(_mm512_loadu_ps(r2+k),xv,a2);a3=_mm512_fmadd_ps(_mm512_loadu_ps(r3+k),xv,a3);}
    y[n]=_mm512_reduce_add_ps(a0);y[n+1]=_mm512_reduce_add_ps(a1);y[n+2]=_mm512_reduce_add_ps(a2);y[n+3]=_mm512_reduce_add_ps(a3);}
}
typedef void(*fn)(const float*,const float*,float*,int,int);
int main(){
  int shapes[3][3]={{896,9728,8},{4864,896,16},{896,151936,1}}; const char*sn[3]={"gate_up","down","head"};
  fn fs[4]={rd,g1,g1p,g4}; const char*fnm[4]={"read","g1","g1pf","g4"};
  float*Ws[3][2][16]; float*x=aligned_alloc(64,4864*4*2),*y=aligned_alloc(64,151936*4);for(int k=0;k<4864*2;k++)x[k]=1;
  for(int s=0;s<3;s++)for(int h=0;h<2;h++)for(int l=0;l<shapes[s][2];l++){size_t b=(size_t)shapes[s][0]*shapes[s][1]*4,al=((b+(2<<20)-1)>>21)<<21;float*w=aligned_alloc(2<<20,al);if(h)madvise(w,al,MADV_HUGEPAGE);else madvise(w,al,MADV_NOHUGEPAGE);for(size_t i=0;i<b/4;i++)w[i]=(float)((i*2654435761u)%1000)*1e-3f;Ws[s][h][l]=w;}
  double res[3][2][4][8];
  for(int rep=0;rep<8;rep++)for(int s=0;s<3;s++)for(int h=0;h<2;h++)for(int f=0;f<4;f++){int K=shapes[s][0],N=shapes[s][1],L=shapes[s][2];double best=1e9;
    for(int r=0;r<4;r++){double t=now();for(int l=0;l<L;l++)fs[f](Ws[s][h][l],x,y,N,K);t=now()-t;if(t<best)best=t;}
    res[s][h][f][rep]=(double)L*N*K*4/1e9/best;}
  for(int s=0;s<3;s++)for(int h=0;h<2;h++)for(int f=0;f<4;f++){printf("%-8s %s %-5s",sn[s],h?"huge":"4k  ",fnm[f]);for(int r=0;r<8;r++)printf(" %5.1f",res[s][h][f][r]);printf("\n");}
}
